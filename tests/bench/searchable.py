"""How soon a memory can be found after its 201, on a warm local stack (issue 48, part 4): by words, and by
meaning (a question that shares no word with the fact, so only meaning can find it). Single adds, and six
facts added one after another (what a LibreChat turn's extraction or a script does), each timed from its
own 201 to a search's answer that has it (the search's own time included; the six are searched once all
six are written), polled every 20 ms. Each trial is its own user, so the fact is the only memory in the
search's scope: "found" is "in the answer", never a ranking question."""

from __future__ import annotations

import time
import uuid

import httpx

# (fact, a question about it sharing no word with it, lower-cased and without stop words)
PAIRS = [
    ("My sister lives in Porto.", "which city is my sibling in"),
    ("I am allergic to peanuts.", "what food should I avoid"),
    ("My car is a red Volvo.", "what vehicle do I drive"),
    ("I play the cello on Sundays.", "which instrument do I practise"),
    ("My dog is called Biscuit.", "what is the name of my pet"),
    ("I work as a nurse.", "what is my job"),
    ("We got married in June 2019.", "when was our wedding"),
    ("My favourite drink is green tea.", "which beverage do I like best"),
    ("I moved to Berlin last spring.", "where do I live now"),
    ("Our daughter started school in September.", "when did the kid begin classes"),
    ("I run a marathon every autumn.", "what race do I do each year"),
    ("The garage door code is 4417.", "how do I open the shed for cars"),
]
POLL_S = 0.02
GIVE_UP_S = 10.0


def _found_after(api: httpx.Client, bot: str, user: str, query: str, since: float, words: bool) -> float:
    """Seconds from `since` until a search finds the user's fact (by words: the fact's own text; by
    meaning: the question, and the answer must say meaning took part); GIVE_UP_S if never."""
    while time.monotonic() - since < GIVE_UP_S:
        answer = api.get(
            f"/v1/bots/{bot}/memories", params={"query": query, "userId": user, "limit": 1}
        ).json()
        if answer["memories"] and (words or answer["meaning"]):
            return time.monotonic() - since  # the answer in hand: the search's own time included
        time.sleep(POLL_S)
    return GIVE_UP_S


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _figures(values: list[float]) -> dict:
    return {
        "p50_ms": round(_p(values, 50) * 1000, 1),
        "p95_ms": round(_p(values, 95) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
        "never (10 s)": sum(v >= GIVE_UP_S for v in values),
        "n": len(values),
    }


def measure(url: str, key: str, rounds: int = 2) -> dict:
    """Write→searchable latencies, by words and by meaning, for single adds and for six in a row."""
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    bot = f"searchable-{uuid.uuid4().hex[:6]}"
    single_words, single_meaning, six_meaning = [], [], []
    for r in range(rounds):
        for i, (fact, question) in enumerate(PAIRS):
            user = f"single-{r}-{i}"
            api.post(f"/v1/bots/{bot}/memories", json={"text": fact, "userId": user}).raise_for_status()
            written = time.monotonic()
            single_words.append(_found_after(api, bot, user, fact, written, words=True))
            single_meaning.append(_found_after(api, bot, user, question, written, words=False))
        for start in range(0, len(PAIRS), 6):
            group = PAIRS[start : start + 6]
            added: list[tuple[str, float]] = []  # (user, when its 201 came)
            for i, (fact, _) in enumerate(group):
                user = f"six-{r}-{start + i}"
                api.post(f"/v1/bots/{bot}/memories", json={"text": fact, "userId": user}).raise_for_status()
                added.append((user, time.monotonic()))
            for (user, at), (_, question) in zip(added, group, strict=True):
                six_meaning.append(_found_after(api, bot, user, question, at, words=False))
    return {
        "single add, found by words": _figures(single_words),
        "single add, found by meaning": _figures(single_meaning),
        "six adds in a row, each found by meaning": _figures(six_meaning),
    }
