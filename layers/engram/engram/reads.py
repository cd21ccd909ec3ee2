"""Reading memories: one, newest first, by words and meaning (one embed, one vector query), and the
words scan of the records when the index is down."""

from __future__ import annotations

import logging

from .domain import FALLBACK_SCAN, Found, Memory, check_limit, check_name, required_name
from .errors import IndexUnavailable, InvalidInput, NotFound
from .indexing import Indexer
from .observability import timed
from .retrieval import Retrieval, feedback_query, feedback_vector
from .store import KINDS, RecordStore, source_key
from .text import check_text, format_memory_id
from .vectors import Scope, VectorIndex
from .words import WordVectorizer

log = logging.getLogger(__name__)


class MemoryReads:
    """The read half of the memory service: one memory, newest first, and search by words and meaning."""

    def __init__(
        self,
        records: RecordStore,
        index: VectorIndex,
        indexer: Indexer,
        words: WordVectorizer,
        retrieval: Retrieval,
    ) -> None:
        self.records = records
        self.index = index
        self.indexer = indexer
        self.words = words
        self.retrieval = retrieval

    @property
    def dense_name(self) -> str | None:
        """The named vector of the current embedding model, or None when vectors are off."""
        return self.indexer.dense_name

    def bots(self) -> list[str]:
        """Every bot that has memories (or had: a bot is registered at its first write)."""
        return sorted(self.records.bots())

    def by_source(self, bot: str, source_id: str) -> Memory | None:
        """The chat message stored under a source message id (a Discord message id), or None."""
        record = self.records.find_unique(bot, source_key(source_id))
        return Memory.from_record(record) if record is not None else None

    def get(self, bot: str, memory_id: int) -> Memory:
        """One memory, or NotFound."""
        record = self.records.get(bot, memory_id)
        if record is None:
            raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
        return Memory.from_record(record)

    def list(
        self,
        bot: str,
        kind: str = "fact",
        limit: int | None = None,
        *,
        server: str | None = None,
        project: str | None = None,
        user: str | None = None,
        before: int | None = None,
    ) -> list[Memory]:
        """Newest first; `before` (a memory id) pages on: only memories older than it."""
        bot, kind, limit = required_name("bot", bot), self._kind(kind), check_limit(limit)
        rows = self.records.newest(
            bot,
            kind,
            limit,
            check_name("serverId", server),
            check_name("project", project),
            check_name("userId", user),
            before,
        )
        return [Memory.from_record(r) for r in rows]

    def search(
        self,
        bot: str,
        query: str,
        kind: str = "fact",
        limit: int | None = None,
        *,
        server: str | None = None,
        project: str | None = None,
        user: str | None = None,
    ) -> Found:
        """Best first, by words and (with vectors on) by meaning; words alone when the embedder is down
        or still loading."""
        scope = Scope(
            bot=required_name("bot", bot),
            kind=self._kind(kind),
            server=check_name("serverId", server),
            project=check_name("project", project),
            user=check_name("userId", user),
        )
        return self.recall(scope, query, check_limit(limit))

    def recall(self, scope: Scope, query: str, k: int) -> Found:
        """The top-k memories of a scope for a query: one embed, one vector query. A search never waits
        for a model to load: until it is warm, words alone answer (`Found.meaning` says which)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query is empty")
        check_text("query", query)
        words = self.words.query(query)
        dense = None
        if self.dense_name is not None and self.indexer.dense_exists(self.dense_name):
            vectors = self.indexer.embed([query], wait=False)
            if vectors:
                dense = (self.dense_name, vectors[0])
        fusion = self.retrieval.fusion(len(words.indices))
        try:
            with timed("vector-query"):
                settings = self.retrieval
                moving = bool(settings.feedback_docs and settings.feedback_dense and dense)
                hits = self.index.search(
                    scope, words, dense, max(k, settings.feedback_min_hits), fusion, with_vector=moving
                )
                # Feedback needs a crowd: in a handful of memories the top three are most of the scope
                if settings.feedback_docs and len(hits) >= settings.feedback_min_hits:
                    # Pseudo-relevance feedback: what the best hits agree on, asked again (no new embed)
                    more_words = feedback_query(words, hits, settings) if words.indices else None
                    more_dense = feedback_vector(dense, hits, settings)
                    if more_words is not None or more_dense is not None:
                        hits = self.index.search(scope, more_words or words, more_dense or dense, k, fusion)
            hits = hits[:k]  # the index ranks equal scores by id: the same question, the same answer
        except IndexUnavailable as exc:
            self.indexer.last_error = exc.message
            log.warning("index unavailable, searching records by words: %s", exc.message)
            return self._words_fallback(scope, query, k)
        found = Found(Memory.from_hit(h) for h in hits)
        found.meaning = dense is not None
        return found

    def similar(self, scope: Scope, text: str) -> tuple[Memory, float] | None:
        """The memory closest in meaning to a text and its cosine similarity (None without vectors)."""
        name = self.dense_name
        if name is None or not self.indexer.dense_exists(name):
            return None
        vectors = self.indexer.embed([text])
        if not vectors:
            return None
        hits = self.index.search(scope, None, (name, vectors[0]), 1, self.retrieval.fusion(0))
        return (Memory.from_hit(hits[0]), hits[0].score) if hits else None

    def _words_fallback(self, scope: Scope, query: str, k: int) -> Found:
        q = self.words.query(query)
        rows = self.records.newest(
            required_name("bot", scope.bot),
            scope.kind or "fact",
            FALLBACK_SCAN,
            scope.server,
            scope.project,
            scope.user,
        )
        scored = [(self.words.score(q, self.words.document(r.text)), r) for r in rows]
        scored = [(s, r) for s, r in scored if s > 0]
        scored.sort(key=lambda pair: (-pair[0], -int(pair[1].id)))
        out = Found()
        for score, r in scored[:k]:
            memory = Memory.from_record(r)
            memory.score = score
            out.append(memory)
        return out

    @staticmethod
    def _kind(kind: str | None) -> str:
        if kind not in KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(KINDS)}")
        return kind
