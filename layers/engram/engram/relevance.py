"""How relevant a found memory is, as a score in [0, 1] that means the same for every query and model.

Search ranks by fusing the ranks of its two legs (engram.vectors.fuse): good for order, meaningless as a
level — the best hit of any query scores the same. The score a caller sees, and the floor it may set
(`minScore`), are built instead from what each leg measured of this one memory:

- meaning: the cosine of the query and the memory, placed between what the model gives unrelated texts
  and what it gives a question and its answer. Both levels are the model's own, measured once per model
  on the reference pairs below (a cosine of 0.3 is close for MiniLM and distant for E5);
- words: the share of the query's terms the memory's text has (stemmed, stop words out).

Either is evidence on its own (a paraphrase shares no word; a name shares little meaning), so they are
combined as independent chances: 1 - (1 - meaning)(1 - words).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .words import terms

# Short questions and the statements that answer them without sharing a word; crossed with each other
# (query i against statement j != i) they are the unrelated pairs. Written for engram, everyday chat.
REFERENCE_PAIRS: tuple[tuple[str, str], ...] = (
    ("what pet does she have", "My cat Luna sleeps on the sofa all day"),
    ("where does he work", "I started as a nurse at the city hospital last spring"),
    ("holiday plans", "We are flying to Lisbon in August"),
    ("car trouble", "The engine made a strange noise so the mechanic replaced the battery"),
    ("exercise routine", "I go running in the park three times a week"),
    ("music taste", "I mostly listen to jazz and old soul records"),
    ("food allergies", "Peanuts make my throat swell up"),
    ("family visit", "My sister and her two kids stayed with us over Christmas"),
    ("hobbies", "On weekends I paint watercolours of the coast"),
    ("what is she studying", "I am finishing a master's degree in chemistry"),
    ("home town", "I grew up in a small village near Krakow"),
    ("bad weather", "It rained all afternoon and the streets flooded"),
    ("books lately", "I just finished a novel by Ishiguro"),
    ("money worries", "Rent went up again and I can barely cover my bills"),
    ("health problems", "The doctor says my blood pressure is too high"),
    ("how old is he", "I turn thirty next Tuesday"),
    ("cooking", "Last night I baked bread with rosemary"),
    ("garden", "The tomatoes in my backyard are finally ripe"),
    ("favourite team", "I never miss a Liverpool match"),
    ("moving house", "We packed the last boxes and signed the lease on the new flat"),
    ("language learning", "I practise Spanish verbs with an app every evening"),
    ("kids", "Our son just started kindergarten"),
    ("commute", "The train to the office takes forty minutes"),
    ("sleep", "I keep waking up at four in the morning"),
)


# The least gap between a model's related and unrelated levels that makes a scale of them
SEPARATION = 0.01
# A model whose levels lie closer than this on plain cosines has one direction in all its vectors: E5's
# are 0.017 apart (every cosine ~0.8), and on LoCoMo's facts the best hit of an unrelated request sat at
# the cosine of real evidence, so a floor kept nothing out. Its cosines are then measured from the mean
# of the reference questions and of the reference statements (centred), where E5's levels are 0.17 apart.
CENTRE_BELOW = 0.05


@dataclass(frozen=True, slots=True)
class Calibration:
    """One model's cosine levels: `unrelated` (what 9 in 10 unrelated pairs stay under) and `related` (what
    a question and its answer reach, the median) — of centred cosines when the means are given."""

    unrelated: float
    related: float
    # the reference questions' and statements' mean vectors, for a model whose plain levels are too close
    # (CENTRE_BELOW): a cosine is then taken of the vectors less these (None: plain cosines)
    query_mean: tuple[float, ...] | None = None
    memory_mean: tuple[float, ...] | None = None

    @property
    def centred(self) -> bool:
        """Whether cosines are taken of centred vectors (`cosine_of` needs both vectors then)."""
        return self.query_mean is not None and self.memory_mean is not None

    def cosine_of(self, query: Sequence[float], memory: Sequence[float]) -> float:
        """The cosine these levels are of: of the two vectors less their means when centred."""
        return _centred_cosine(query, self.query_mean, memory, self.memory_mean)

    def between_memories(self, a: Sequence[float], b: Sequence[float]) -> float:
        """The cosine of two memories' vectors (a new fact against one kept): less the memories' mean when
        centred (E5 puts unrelated facts ~0.9 apart plainly, where a dedupe threshold takes them for one)."""
        return _centred_cosine(a, self.memory_mean, b, self.memory_mean)

    def meaning(self, cosine: float | None) -> float:
        """A cosine on the model's own scale, in [0, 1]: 0 at or below what unrelated texts reach, 0.5 where a
        question and an answer sharing no word sit, 1 twice as far above unrelated (None, a memory the
        meaning leg did not find near: 0)."""
        if cosine is None or not math.isfinite(cosine):
            return 0.0
        if self.related - self.unrelated < SEPARATION:
            # a model that cannot tell the pairs apart gives no scale to place a cosine on: taken at its word
            return min(1.0, max(0.0, cosine))
        return min(1.0, max(0.0, (cosine - self.unrelated) / (2 * (self.related - self.unrelated))))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors (0 for a zero vector)."""
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


QUERIES = tuple(q for q, _ in REFERENCE_PAIRS)
STATEMENTS = tuple(s for _, s in REFERENCE_PAIRS)


def calibrate(queries: list[list[float]], statements: list[list[float]]) -> Calibration:
    """A model's levels from its vectors of the reference pairs: the questions embedded as search embeds a
    query, the statements as memories are (E5 tells the two apart); of centred cosines where plain ones lie
    too close together (CENTRE_BELOW)."""
    plain = _levels(queries, statements)
    if plain.related - plain.unrelated >= CENTRE_BELOW:
        return plain
    query_mean, memory_mean = _mean(queries), _mean(statements)
    centred = _levels([_less(q, query_mean) for q in queries], [_less(s, memory_mean) for s in statements])
    return Calibration(centred.unrelated, centred.related, query_mean, memory_mean)


def _levels(queries: Sequence[Sequence[float]], statements: Sequence[Sequence[float]]) -> Calibration:
    related = [cosine(q, s) for q, s in zip(queries, statements, strict=True)]
    unrelated = sorted(
        cosine(q, s) for i, q in enumerate(queries) for j, s in enumerate(statements) if i != j
    )
    return Calibration(
        unrelated=unrelated[int(0.9 * (len(unrelated) - 1))], related=statistics.median(related)
    )


def _mean(vectors: Sequence[Sequence[float]]) -> tuple[float, ...]:
    return tuple(statistics.fmean(column) for column in zip(*vectors, strict=True))


def _centred_cosine(
    a: Sequence[float], a_mean: Sequence[float] | None, b: Sequence[float], b_mean: Sequence[float] | None
) -> float:
    """The cosine of two vectors, each less its mean (plain without both means)."""
    if a_mean is None or b_mean is None:
        return cosine(a, b)
    return cosine(_less(a, a_mean), _less(b, b_mean))


def _less(vector: Sequence[float], mean: Sequence[float]) -> list[float]:
    return [x - m for x, m in zip(vector, mean, strict=True)]


def words_share(query_terms: set[str], text: str, also: Iterable[str] = ()) -> float:
    """The share of the query's terms a memory's text has (and `also`: terms it has beside its text, as
    the words naming its day or its author — only where the query asks more than those: "thanks, Mel!"
    is not a question every memory of Mel's answers). One word of two is half the question; one of many is
    no sign (a common word of a sentence is shared by many unrelated texts), so a query of three terms or
    more needs two of them found (0 for a query of stop words alone)."""
    beside = set(also)
    has = set(terms(text)) | (beside if query_terms - beside else set())
    found = len(query_terms & has)
    if not query_terms or (found < 2 and len(query_terms) > 2):
        return 0.0
    return found / len(query_terms)


def combined(meaning: float, words: float) -> float:
    """Two independent signs of relevance as one: 1 - (1 - meaning)(1 - words)."""
    return 1.0 - (1.0 - meaning) * (1.0 - words)
