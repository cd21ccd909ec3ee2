"""Days a question names ("what did Nate cook on 9 November, 2022?", "what did I say yesterday?"): a
memory's day lives in its createdAt, never in its words, so neither the words nor the meaning leg can match
it. A question naming a day searches that day's memories too, and they move up (engram.reads).

Only days written unambiguously are read: "9 November 2022", "9th of November, 2022", "November 9, 2022",
"2022-11-09", and from the moment of the search "today", "tonight", "this morning", "yesterday", "last
night", "the day before yesterday", "three days ago" and "two weeks ago" (up to 31 days), "last Friday"
(the latest before today), "last weekend" (the latest Saturday and Sunday before today), and a weekday in a
question asked in the past tense ("what did we decide on Tuesday?": the latest Tuesday before today). A
date written with numbers alone ("11/09/2022") reads as two different days in two countries and is left
alone, as are a month, a year or a week alone (too wide to move up) and a weekday in a question not asked in
the past ("any plans for Friday?", "what's on Tuesday?", "what did you say will happen on Tuesday?" are
about the coming one).

Where a question writes a date, the days it counts from a moment are counted from that date's moment, not
the search's: "what did Joanna finish last Friday, as she said on 23 January, 2022?" asks of what was said
on the 23rd — a memory is dated when it was said, and "last Friday" is when what it tells happened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta

from .vectors import Hit

DAY_MS = 86_400_000
# A day is read in UTC while its memories were written in their people's own time zones: a day's span
# reaches a day either side, so "on 9 November" still finds what was said that evening in New York
# (stored as the 10th in UTC) or that morning in Tokyo (the 8th)
MARGIN_MS = DAY_MS

_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH = "|".join([*_MONTHS, *(m[:3] for m in _MONTHS), "sept"])  # "9 Nov 2022", "Sept. 3, 2023"
_DAY, _NTH, _YEAR = r"[0-3]?\d", r"(?:st|nd|rd|th)?", r"(?:19|20)\d\d"
_WRITTEN = re.compile(
    rf"\b(?:(?P<d1>{_DAY}){_NTH}(?:\s+of)?\s+(?P<m1>{_MONTH})\.?,?\s+(?P<y1>{_YEAR})"  # 9th of November, 2022
    rf"|(?P<m2>{_MONTH})\.?\s+(?P<d2>{_DAY}){_NTH},?\s+(?P<y2>{_YEAR})"  # November 9, 2022
    rf"|(?P<y3>{_YEAR})-(?P<m3>[01]\d)-(?P<d3>[0-3]\d))\b",  # 2022-11-09
    re.IGNORECASE,
)
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
# Only a weekday said to be past: "on Friday" is as often the coming one ("any plans for Friday?")
_WEEKDAY = re.compile(
    rf"\b(?:last|past|this\s+past)\s+(?P<day>{'|'.join(_WEEKDAYS)}|weekend)\b", re.IGNORECASE
)
# A weekday alone ("on Tuesday", "Tuesday"), read only in a question asked in the past tense and saying
# nothing of the future: "what did we decide on Tuesday?" is the last one, "what's on Tuesday?" the next.
# A weekday after a word that places it otherwise ("next", "every", "for", "until") is not, nor a plural
# ("on Tuesdays": every one) or a possessive ("Tuesday's meeting" may be the coming one's).
_ANY_WEEKDAY = re.compile(
    rf"(?:\b(?P<word>[a-z]+)\s+)?\b(?P<day>{'|'.join(_WEEKDAYS)})\b(?!['’]s\b)", re.IGNORECASE
)
_PLACED = frozenset(
    (
        "last",
        "past",
        "next",
        "this",
        "coming",
        "following",
        "every",
        "each",
        "for",
        "until",
        "till",
        "by",
        "before",
        "after",
        "since",
    )
)
_PAST = re.compile(r"\b(?:did|was|were|had)(?:n['’]?t)?\b", re.IGNORECASE)
_FUTURE = re.compile(r"\b(?:will|won['’]?t|shall|gonna|going to)\b|['’]ll\b", re.IGNORECASE)
_COUNTS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_RELATIVE = re.compile(
    r"\b(?:(?P<before>the day before yesterday)|(?P<today>today|tonight|this morning)"
    r"|(?P<yesterday>yesterday|last night)"
    r"|(?P<count>\d{1,2}|a|one|two|three|four|five|six|seven) (?P<unit>days?|weeks?) ago)\b",
    re.IGNORECASE,
)


def _days_back(m: re.Match[str]) -> int | None:
    """How many days before the search a relative day is (None: too far to be a day one remembers)."""
    if m["before"]:
        return 2
    if m["today"]:
        return 0
    if m["yesterday"]:
        return 1
    count = m["count"].lower()
    back = (int(count) if count.isdigit() else _COUNTS[count]) * (7 if m["unit"].startswith("week") else 1)
    return back if back <= 31 else None


def _weekdays_back(m: re.Match[str], today: date) -> tuple[int, ...]:
    """How many days before the search the last such weekday is (the latest before today: 1 to 7 days
    back), or the last weekend's Saturday and Sunday (the latest both before today)."""
    day = m["day"].lower()
    back = (today.weekday() - _WEEKDAYS.index("sunday" if day == "weekend" else day) - 1) % 7 + 1
    return (back + 1, back) if day == "weekend" else (back,)


def _month(word: str) -> int:
    word = word.lower()
    return next(n for n, name in enumerate(_MONTHS, start=1) if name.startswith(word[:3]))


def _day(year: str, month: int, day: str) -> date | None:
    try:
        return date(int(year), month, int(day))
    except ValueError:  # "31 February"
        return None


@dataclass(frozen=True, slots=True)
class NamedDays:
    """The days a question names: each as the span of createdAt (ms, from inclusive, to exclusive) its
    memories may have, a day's margin either side; and the question's words that name them ("yesterday",
    "9 November, 2022"), which a memory of those days has as surely as the words of its text."""

    spans: tuple[tuple[int, int], ...] = ()
    words: str = ""


def read_days(question: str, now_ms: int) -> NamedDays:
    """The days a question names (none: NamedDays())."""
    today = datetime.fromtimestamp(now_ms / 1000, tz=UTC).date()
    # a written date is when it was said: what is counted from it is not another day's
    written = _written_days(question)
    named = written or _counted_days(question, today)
    days = {day for _, found in named for day in found}
    spans = []
    for day in sorted(days):
        start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
        spans.append((start - MARGIN_MS, start + DAY_MS + MARGIN_MS))
    # "today" is as often what a request is for ("how are you today?", "what should I cook tonight?") as
    # what it asks about: its words are told only of days gone by, or written
    words = [said for said, found in named if found and (written or max(found) < today)]
    return NamedDays(tuple(spans), " ".join(words))


def _written_days(question: str) -> list[tuple[str, set[date]]]:
    """The dates a question writes ("9 November, 2022", "2022-11-09"), each with its words."""
    named = []
    for m in _WRITTEN.finditer(question):
        if m["y1"]:
            found = _day(m["y1"], _month(m["m1"]), m["d1"])
        elif m["y2"]:
            found = _day(m["y2"], _month(m["m2"]), m["d2"])
        else:
            found = _day(m["y3"], int(m["m3"]), m["d3"])
        if found is not None:
            named.append((m[0], {found}))
    return named


def _counted_days(question: str, today: date) -> list[tuple[str, set[date]]]:
    """The days a question counts back from the moment of the search ("yesterday", "last Friday"), each
    with its words."""
    named = []
    for m in _RELATIVE.finditer(question):
        back = _days_back(m)
        if back is not None:
            named.append((m[0], {today - timedelta(days=back)}))
    for m in _WEEKDAY.finditer(question):
        named.append((m[0], {today - timedelta(days=back) for back in _weekdays_back(m, today)}))
    if _PAST.search(question) and not _FUTURE.search(question):
        for m in _ANY_WEEKDAY.finditer(question):
            if (m["word"] or "").lower() not in _PLACED:
                named.append((m["day"], {today - timedelta(days=_weekdays_back(m, today)[0])}))
    return named


def on_days(created_at: object, spans: Sequence[tuple[int, int]]) -> bool:
    """Whether a createdAt (ms) falls in one of these spans."""
    return isinstance(created_at, int | float) and any(a <= created_at < b for a, b in spans)


def favour_dated(
    hits: Sequence[Hit], dated: Sequence[Hit], spans: Sequence[tuple[int, int]], weight: float, k: int
) -> list[Hit]:
    """The hits of a search with the named days' own (`dated`: the same question asked of those days
    alone) merged in, and every hit of those days moved up by `weight` times the best hit's score (0:
    nothing moves). Scores become reciprocal ranks (1 / (k + rank), the fusion's scale): a day's hit the
    search did not reach ranks after every hit it did, in the order its day's search gave, before it moves.
    """
    if not weight or not spans or not dated:
        return list(hits)
    reached = {h.id for h in hits}
    ranked = [*hits, *(h for h in dated if h.id not in reached)]
    lift = weight / k
    moved = [
        replace(h, score=1.0 / (k + n) + (lift if on_days(h.payload.get("createdAt"), spans) else 0.0))
        for n, h in enumerate(ranked)
    ]
    return sorted(moved, key=lambda h: -h.score)
