"""Sparse word vectors: our own tokenizer, Snowball stemming and BM25 term weights.

Qdrant applies the IDF half (sparse vector `Modifier.IDF`), so a document carries only its
length-normalised term frequencies and a query carries 1.0 per distinct term.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import Stemmer

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

# Function words and question words: they say nothing about which memory is meant.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
        "also",
        "get",
        "got",
        "ever",
        "really",
        "yeah",
        "oh",
        "hey",
        "hi",
        "thanks",
        "thank",
        "lol",
        "ok",
        "okay",
    ]
)


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Indices and values, as Qdrant takes them."""

    indices: list[int]
    values: list[float]


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


@lru_cache(maxsize=4096)
def _folded_letter(ch: str) -> str:
    """A Latin letter without its accents ("é" -> "e"); any other character as it is (a Devanagari vowel
    sign or a Hebrew point is part of its word, not an accent)."""
    parts = unicodedata.normalize("NFKD", ch)
    base, marks = parts[:1], parts[1:]
    if base.isascii() and base.isalpha() and marks and all(unicodedata.combining(m) for m in marks):
        return base
    return ch


def fold_accents(text: str) -> str:
    """The text with Latin letters' accents taken off: "Amélie" and "Amelie", "café" and "cafe" are one
    word to the index, as people type them either way."""
    return text if text.isascii() else "".join(_folded_letter(ch) for ch in text)


def terms(text: str, folded: bool = True) -> list[str]:
    """Lower-cased, stop-word-free, stemmed terms of a text, in order; accents folded (`folded`: False,
    as points written before 1.5 hold them)."""
    text = text.casefold()
    words = [
        w
        for w in _TOKEN.findall(fold_accents(text) if folded else text)
        if w not in STOPWORDS and len(w) < 40
    ]
    stemmed: list[str] = _stemmer().stemWords(words)
    return stemmed


def term_index(term: str) -> int:
    """A stable 31-bit index for a term (the same in every process and release)."""
    return zlib.crc32(term.encode()) & 0x7FFFFFFF


@dataclass(frozen=True)
class WordVectorizer:
    """Turns documents and queries into BM25-weighted sparse vectors. Short-text BM25 settings (weak length
    normalisation; chat turns average ~12 terms): on LoCoMo k1=0.9, b=0.4 beat the long-document defaults
    k1=1.2, b=0.75 by 0.01 R@10 on words alone. The weights are how much a document's context, date and
    window count beside its own words."""

    k1: float = 0.9
    b: float = 0.4
    average_length: float = 12.0
    context_weight: float = 0.3
    date_weight: float = 0.0
    window_weight: float = 0.0

    def _weights(self, text: str) -> dict[int, float]:
        counts = Counter(term_index(t) for t in terms(text))
        length = sum(counts.values())
        norm = self.k1 * (1 - self.b + self.b * length / self.average_length)
        return {i: c * (self.k1 + 1) / (c + norm) for i, c in counts.items()}

    def document(  # noqa: PLR0913 - a document and each text that counts beside it, by name
        self,
        text: str,
        context: str | None = None,
        date: str | None = None,
        window: str | None = None,
        author: str | None = None,
    ) -> SparseVector:
        """A document's term weights: BM25's saturated, length-normalised term frequency, plus a
        fraction of its conversation context's (the message it follows), of its date's words and of its
        window's (the turns around it, as one text), and its author's names in full (beside the text, not
        in it: a name makes no text longer, so a named author's memories lose nothing to the unnamed)."""
        weights = self._weights(text)
        extras = (
            (context, self.context_weight),
            (date, self.date_weight),
            (window, self.window_weight),
            (author, 1.0),
        )
        for extra, weight in extras:
            if extra and weight:
                for i, w in self._weights(extra).items():
                    weights[i] = weights.get(i, 0.0) + weight * w
        indices = sorted(weights)
        return SparseVector(indices, [weights[i] for i in indices])

    def query(self, text: str) -> SparseVector:
        """A query's terms, each once with weight 1 (IDF comes from the index). A word with accents is asked
        both ways: folded, as points hold it now, and as written, as points from before 1.5 hold it."""
        asked = set(terms(text))
        if not text.isascii():
            asked |= set(terms(text, folded=False))
        indices = sorted({term_index(t) for t in asked})
        return SparseVector(indices, [1.0] * len(indices))

    def score(self, query: SparseVector, document: SparseVector) -> float:
        """Dot product of two sparse vectors, without IDF (the fallback when the index is down)."""
        weights = dict(zip(document.indices, document.values, strict=False))
        return sum(v * weights.get(i, 0.0) for i, v in zip(query.indices, query.values, strict=False))
