"""The memory service: the one place where every front door's memory rules live — writes (engram.writes)
and reads (engram.reads) over the two stores."""

from __future__ import annotations

import logging

# The front doors' names for what a memory is, from where they always came
from .domain import MAX_CONTEXT_CHARS, ChatMessage, Found, Memory, check_limit, check_name  # noqa: F401
from .embedders import Embedder, NoEmbedder
from .indexing import Indexer
from .jobs import JobQueue
from .reads import MemoryReads
from .retrieval import DEFAULT, Retrieval
from .store import RecordStore, StateStore
from .vectors import VectorIndex
from .words import WordVectorizer
from .writes import MemoryWrites

log = logging.getLogger(__name__)


class MemoryService(MemoryWrites, MemoryReads):
    """Adds, changes, removes, lists, searches, recalls and forgets memories across both stores."""

    def __init__(
        self,
        records: RecordStore,
        index: VectorIndex,
        embedder: Embedder | NoEmbedder,
        queue: JobQueue,
        retrieval: Retrieval = DEFAULT,
        message_vector_chars: int = 8000,
        state: StateStore | None = None,
    ):
        self.records = records
        self.state = state or StateStore()
        # Called with (bot, user) after a forget: caches that could still serve the user drop them
        self.forget_hooks: list = []
        self.index = index
        self.queue = queue
        self.retrieval = retrieval
        self.words = WordVectorizer(
            retrieval.k1,
            retrieval.b,
            context_weight=retrieval.words_context,
            date_weight=retrieval.date_terms,
        )
        self.indexer = Indexer(
            records, index, embedder, queue, self.words, message_vector_chars, retrieval, state=self.state
        )

    # The embedder and its state belong to the indexer; these read through for the front doors.
    @property
    def embedder(self) -> Embedder | NoEmbedder:
        """The current embedder."""
        return self.indexer.embedder

    @property
    def dense_name(self) -> str | None:
        """The named vector of the current embedding model, or None when vectors are off."""
        return self.indexer.dense_name

    @property
    def last_error(self) -> str | None:
        """The last reason vectors could not be made or written."""
        return self.indexer.last_error

    # ----- writes --------------------------------------------------------------------------------
