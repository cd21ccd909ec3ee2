"""The memory service: the one place where every front door's memory rules live, composed of its writes
(engram.writes), its reads (engram.reads) and the forget that reaches every store (engram.forgetting)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

# The front doors' names for what a memory is, from where they always came
from .domain import MAX_CONTEXT_CHARS, Added, ChatMessage, Found, Memory, check_limit, check_name  # noqa: F401
from .embedders import Embedder, NoEmbedder
from .forgetting import DOOR_BUDGET_S, ForgetHook, Forgetting
from .indexing import Indexer
from .jobs import JobQueue
from .lifecycle import Lifecycle
from .parts import MemoryParts
from .ports import RecordsPort, StatePort
from .reads import MemoryReads
from .retrieval import DEFAULT, Retrieval
from .vectors import VectorIndex
from .words import WordVectorizer
from .writes import MemoryWrites

log = logging.getLogger(__name__)
__all__ = ["Added", "ChatMessage", "Found", "Memory", "MemoryService"]


class MemoryService:
    """Adds, changes, removes, lists, searches, recalls and forgets memories across both stores. Each
    operation is its collaborator's method, bound here so the front doors have one object to call."""

    def __init__(
        self,
        records: RecordsPort,
        index: VectorIndex,
        embedder: Embedder | NoEmbedder,
        queue: JobQueue,
        state: StatePort,
        retrieval: Retrieval = DEFAULT,
        message_vector_chars: int = 8000,
    ) -> None:
        words = WordVectorizer(
            retrieval.k1,
            retrieval.b,
            context_weight=retrieval.words_context,
            date_weight=retrieval.date_terms,
            window_weight=retrieval.words_window,
        )
        parts = MemoryParts(records, state, index, queue, words, retrieval)
        self.records, self.state, self.index = records, state, index
        self.queue, self.words = queue, words
        # Called with (bot, user) after a forget: caches that could still serve the user drop them
        self._forget_hooks: list[ForgetHook] = []
        self.indexer = Indexer(parts, embedder, message_vector_chars)
        self.writes = MemoryWrites(parts, self.indexer)
        self.reads = MemoryReads(parts, self.indexer)
        self.forgetting = Forgetting(self.writes, self._forget_hooks)
        self.lifecycle = Lifecycle(self.writes, self.reads)
        # writes
        self.refused = self.writes.refused
        self.add_fact = self.writes.add_fact
        self.add_messages = self.writes.add_messages
        self.update = self.writes.update
        self.relabel = self.lifecycle.relabel
        self.history = self.lifecycle.history
        self.clear_history = self.lifecycle.clear_history
        self.expire = self.lifecycle.expire
        self.expire_all = self.lifecycle.expire_all
        self.edit_message = self.writes.edit_message
        self.remove = self.writes.remove
        self.remove_ids = self.writes.remove_ids
        self.remove_sources = self.writes.remove_sources
        self.remove_thread = self.writes.remove_thread
        self.remove_server = self.writes.remove_server
        self.remove_aged = self.writes.remove_aged
        self.release_words = self.writes.release_words
        # reads
        self.bots = self.reads.bots
        self.by_source = self.reads.by_source
        self.by_sources = self.reads.by_sources
        self.get = self.reads.get
        self.list = self.reads.list
        self.search = self.reads.search
        self.recall = self.reads.recall
        self.similar = self.reads.similar

    def on_forget(self, hook: ForgetHook) -> None:
        """Call `hook(bot, user)` after every forget made in this process (caches that could still serve the
        user drop them; the local stack purges its files)."""
        self._forget_hooks.append(hook)

    def on_change(self, hook: Callable[[str], None]) -> None:
        """Call `hook(bot)` after a memory is removed or its words changed in this process (the local stack
        rewrites its files without the old words)."""
        self.writes.change_hooks.append(hook)

    def forget_user(
        self, bot: str, user: str, *, at: int | None = None, budget_s: float = DOOR_BUDGET_S
    ) -> dict[str, Any]:
        """Forget a user everywhere engram keeps anything of theirs (see engram.forgetting): `done` says
        whether it finished within `budget_s`, `left` how many records jobs are still deleting (every read
        hides them meanwhile)."""
        return self.forgetting.forget(bot, user, at=at, budget_s=budget_s)

    # The embedder and its state belong to the indexer; these read through for the front doors.
    @property
    def retrieval(self) -> Retrieval:
        """How retrieval is tuned for the current model (Retrieval.for_model)."""
        return self.indexer.retrieval

    @retrieval.setter
    def retrieval(self, settings: Retrieval) -> None:
        """Tune retrieval by these from now on (the words keep the vectorizer they were made with)."""
        self.indexer.retrieval = settings

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
