"""What the memory rules work on, handed to each of them as one value: the records and the state kept
beside them, the vector index, the jobs queue, the words vectorizer and how retrieval is tuned. Built once
per service (engram.service), so the writes, the reads and the indexer share exactly the same ones."""

from __future__ import annotations

from dataclasses import dataclass

from .jobs import JobQueue
from .ports import RecordsPort, StatePort
from .retrieval import Retrieval
from .vectors import VectorIndex
from .words import WordVectorizer


@dataclass(frozen=True, slots=True)
class MemoryParts:
    records: RecordsPort
    state: StatePort
    index: VectorIndex
    queue: JobQueue
    words: WordVectorizer
    retrieval: Retrieval
