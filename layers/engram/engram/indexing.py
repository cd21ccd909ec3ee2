"""The vector index as derived data. `Indexer` writes records' points (words, and the current model's
meaning, mixed along each record's window) and keeps pending records moving (index jobs, the sweep);
`engram.keeper.IndexKeeper` keeps the index a faithful copy of the records."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from .embedders import Embedder, NoEmbedder, own_vector_name, vector_name
from .errors import EmbedderUnavailable, IndexUnavailable, Unavailable
from .jobs import IndexJob
from .line_spans import LineReader
from .line_windows import LineWindows, _Held, mix_meaning
from .names import indexed_text
from .observability import record_value, timed
from .parts import MemoryParts
from .retrieval import Retrieval
from .shapes import payload
from .store import Record, now_ms
from .vectors import IndexPoint
from .words import SparseVector

log = logging.getLogger(__name__)
# Re-embedding embeds the next chunk while the previous one's vectors are stored (DynamoDB and Qdrant
# wait on I/O while torch computes): 60 % -> 80 %+ of the embedder's own throughput here.
PIPELINE_CHUNK = 250
# The sweep queues at most this many of a bot's pending records a pass, oldest first, and starts its pass
# again from the oldest this long after it began (SQS: 6 x 180 s visibility x 3 receives, then the DLQ).
SWEEP_LIMIT = 10_000
REQUEUE_MS = 60 * 60_000


def is_warm(embedder: Embedder | NoEmbedder) -> bool:
    """Whether the embedder answers without loading a model first (remote ones always do)."""
    return bool(getattr(embedder, "warm", True))


class Indexer:
    """Writes points for records and marks them indexed; a record stays pending (and a job or the sweep
    finishes it) whenever the index, or the embedder, cannot be had right now."""

    def __init__(self, parts: MemoryParts, embedder: Embedder | NoEmbedder, message_vector_chars: int = 8000):
        self.records, self.state, self.index = parts.records, parts.state, parts.index
        self.queue, self.words = parts.queue, parts.words
        self.embedder = embedder
        self._settings = parts.retrieval  # as given; `retrieval` is them as the current model uses them
        self._tuned = self._settings.for_model(getattr(embedder, "model", None))
        self.message_vector_chars = message_vector_chars
        self.last_error: str | None = None
        self.dense_ready: set[str] = set()
        self._lined = LineWindows(parts, lambda: self.retrieval, lambda: self.dense_name, self.dense_exists)
        self._ahead = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed-ahead")
        # A write's windows are read from DynamoDB while its text is embedded: the reads cost it no time
        self._windows = ThreadPoolExecutor(max_workers=2, thread_name_prefix="windows")

    @property
    def retrieval(self) -> Retrieval:
        """How retrieval is tuned for the current model (Retrieval.for_model: its own settings, if any)."""
        return self._tuned

    @retrieval.setter
    def retrieval(self, settings: Retrieval) -> None:
        self._settings = settings
        self._tuned = settings.for_model(getattr(self.embedder, "model", None))

    @property
    def dense_name(self) -> str | None:
        """The named vector of the current embedding model, or None when vectors are off."""
        if isinstance(self.embedder, NoEmbedder):
            return None
        return vector_name(self.embedder.provider, self.embedder.model)

    def vector_text(self, r: Record) -> str | None:
        """The text a record's dense vector is made of (None: no dense vector)."""
        text = indexed_text(r, self.retrieval.author_label)
        if r.kind == "message":
            return text[: self.message_vector_chars] if self.message_vector_chars > 0 and r.text else None
        return text

    def embed(self, texts: list[str], wait: bool = True, query: bool = False) -> list[list[float]] | None:
        """Dense vectors, or None when the embedder is off or down (the reason is kept), or still
        loading and the caller will not wait. `query`: texts searched with, for a model trained with a
        query side (E5's "query: "); the others embed them as they embed memories."""
        if self.dense_name is None or not texts or (not wait and not is_warm(self.embedder)):
            return None
        embed = getattr(self.embedder, "embed_queries", None) if query else None
        try:
            with timed("embed"):
                return (embed or self.embedder.embed)(texts)
        except EmbedderUnavailable as exc:
            self.last_error = exc.message
            log.warning("embedder unavailable: %s", exc.message)
            return None

    def use(self, embedder: Embedder | NoEmbedder, message_vector_chars: int) -> None:
        """Make vectors with this embedder from now on, and of this many characters of a chat message."""
        tuned = self._settings.for_model(getattr(embedder, "model", None))
        self.embedder, self.message_vector_chars, self._tuned = embedder, message_vector_chars, tuned

    def failed(self, reason: str) -> None:
        """Remember why vectors could not be made or written just now (shown by the embedding status)."""
        self.last_error = reason

    def dense_dropped(self, name: str) -> None:
        """A model's vectors were dropped from the index: none of its points is there any more."""
        self.dense_ready.discard(name)

    def dense_exists(self, name: str) -> bool:
        """Whether the index has this model's vectors yet (cached once true)."""
        if name not in self.dense_ready:
            try:
                if name not in self.index.dense_names():
                    return False
            except IndexUnavailable:
                return False
            self.dense_ready.add(name)
        return True

    def dense_vectors(self, records: list[Record], wait: bool = True) -> dict[int, list[float]]:
        """Each record's dense vector: its own text's embedding, mixed with its conversation context's when
        that counts (`dense_context`). One batched embed call; None texts skipped."""
        own = {int(r.id): self.vector_text(r) for r in records}
        # a context counts in meaning only at a weight: at 0 its text is not embedded at all
        mixed = [r for r in records if r.context and own[int(r.id)]] if self.retrieval.dense_context else []
        context = {int(r.id): (r.context or "")[: self.message_vector_chars] for r in mixed}
        texts = list(dict.fromkeys([t for t in own.values() if t] + list(context.values())))
        vectors = self.embed(texts, wait)
        name = self.dense_name
        if not vectors or name is None:
            return {}
        for wanted in [name, own_vector_name(name)] if self.mixing else [name]:
            if wanted not in self.dense_ready:
                self.index.ensure_dense(wanted, len(vectors[0]))
                self.dense_ready.add(wanted)
        by_text = dict(zip(texts, vectors, strict=False))
        return {
            memory_id: mix_meaning(by_text[text], by_text[context[memory_id]], self.retrieval.dense_context)
            if memory_id in context
            else by_text[text]
            for memory_id, text in own.items()
            if text
        }

    # ----- windows: the turns around a memory (engram.line_windows) ---------------------------------

    @property
    def window_turns(self) -> int:
        """How many records each side a window may hold (0: windows are off; LineWindows.window_turns)."""
        return self._lined.window_turns

    @property
    def mixing(self) -> bool:
        """Whether a point's searched meaning is mixed with its window's (its own is kept beside it)."""
        return self._lined.mixing

    def words_of(self, record: Record) -> SparseVector:
        """A record's words as its point holds them, without its window's (the words fallback scores a
        record so, with the index down: one place decides a record's words)."""
        return self._lined.words_of(record, None)

    def rewindow(self, records: list[Record], removed: bool = False, with_self: bool = False) -> int:
        """The records around these ones (changed, or `removed`; and these, `with_self`) get their windows
        again (see LineWindows.rewindow)."""
        return self._lined.rewindow(records, removed, with_self)

    def mix_own(
        self, records: list[Record], reads: LineReader | None = None, beside: Sequence[Record] = ()
    ) -> int:
        """A re-embed's second pass over these records (see LineWindows.mix_own)."""
        return self._lined.mix_own(records, reads, beside)

    def embed_ahead(self, records: list[Record]) -> Future[dict[int, list[float]]] | None:
        """Start the records' dense vectors now, in the background (a write embeds while DynamoDB stores
        the records); None when vectors are off or the model is still loading."""
        if self.dense_name is None or not is_warm(self.embedder) or not records:
            return None
        return self._ahead.submit(self.dense_vectors, records)

    def index_records(
        self,
        records: list[Record],
        wait: bool = True,
        ahead: Future[dict[int, list[float]]] | None = None,
        reads: LineReader | None = None,
        whole_pass: bool = False,
    ) -> int:
        """Write the points of records (words always, meaning when the embedder answers; without
        `wait`, only if it is warm; `ahead`: vectors already being made; `reads`: a maintenance step's
        line reads); returns how many are complete. Records left incomplete are (or stay) pending.
        `whole_pass`: a rebuild, which writes every point of the bot from its own page: the points around
        these need no new words (their windows are read from the same records), only (mixing on) their
        meaning mixed again with these ones' vectors, and with mixing off nothing at all."""
        if not records:
            return 0
        wanted = [(r, self.vector_text(r)) for r in records]
        own_only = whole_pass and not self.mixing
        reading = (
            self._windows.submit(self._lined.read_around, records, reads, own_only)
            if self.window_turns
            else None
        )
        dense_by_id = ahead.result() if ahead is not None else self.dense_vectors(records, wait)
        name = self.dense_name
        lines, held = reading.result() if reading is not None else ({}, _Held())
        held.know(records, dense_by_id)
        windows = self._lined.windows(records, lines)
        meanings = self._lined.meanings(records, lines, held)
        points = [
            IndexPoint(
                id=int(r.id),
                payload=payload(r),
                words=self._lined.words_of(r, windows.get(int(r.id))),
                dense=meanings.get(int(r.id), {}),
            )
            for r in records
        ]
        self.index.upsert(points)
        if lines:  # the turns before (and after) these ones now have them in their windows
            if not own_only:
                self._lined.rewrite_around(records, lines, held, with_words=not whole_pass)
            if self._lined.forgotten_since(lines):
                # a forget began after the lines were read, and its own pass over the windows may have run
                # before these points existed: the windows are made again without that person's words
                self.rewindow(records, with_self=True)
        done = [
            (r, name if int(r.id) in dense_by_id else None)
            for r, text in wanted
            if int(r.id) in dense_by_id or not text or name is None
        ]
        complete = self._mark_written(records, done)
        if complete == len(records):
            self.last_error = None
        return complete

    def _mark_written(self, records: list[Record], done: list[tuple[Record, str | None]]) -> int:
        """Mark the records whose points are complete (`done`, with their dense model) indexed, and the
        others pending; a record deleted meanwhile has its point taken back. Returns how many are complete."""
        vanished = [int(r.id) for r in self.records.pending.mark_indexed_many(done)]
        complete = len(done) - len(vanished)
        finished = {int(r.id) for r, _ in done}
        # a record marked indexed whose point is now incomplete (a rebuild with the embedder down) waits
        # for the sweep again; its step, retried from its cursor, covers a crash before this mark
        unmarked = [r for r in records if not r.pending and int(r.id) not in finished]
        still = {int(r.id) for r in self.records.pending.mark_pending_many(unmarked)}
        vanished += [int(r.id) for r in unmarked if int(r.id) not in still]
        if vanished:  # deleted while we embedded: take back the points we just wrote
            self.index.delete(vanished)
        return complete

    def unforgotten(self, records: list[Record]) -> list[Record]:
        """Records whose user was not forgotten after they were made. The others are what a forget that
        stopped half-way (a crash, a DynamoDB error) left: no point is written for them, and they are
        deleted, finishing that forget, so a reconcile or a rebuild never makes them findable again.
        Asked by the paths that index records they did not just write (index jobs, re-embedding, reconcile
        and rebuild); a write has read the tombstones itself."""
        if not records:
            return records
        authors = {r.context_author for r in records if r.context and r.context_author}
        gone = self.state.tombstones.when(records[0].bot, {r.user for r in records if r.user} | authors)
        if not gone:
            return records
        # compared with when engram received each record, not the time its caller gave it (a re-remembered
        # user's history carries old timestamps and stays)
        forgotten = [r for r in records if r.user in gone and gone[r.user] >= r.arrived]
        self._finish_forgets(forgotten)
        dropped = {int(r.id) for r in forgotten}
        kept = [r for r in records if int(r.id) not in dropped]
        for r in kept:  # a context quoting someone forgotten since (no carrier named it, or a forget raced)
            if r.context and r.context_author in gone and gone[r.context_author] >= r.arrived:
                log.warning("clearing a context whose author was forgotten")
                self.records.clear_context(r)
        return kept

    def _finish_forgets(self, left: list[Record]) -> None:
        """Delete records of forgotten users, unless their forget is still under way: it deletes them
        itself (resumed by the sweep or the next start, bounded and counted), so only what a forget that
        ended without them left is deleted here."""
        if not left:
            return
        under_way = self.state.tombstones.under_way(left[0].bot)
        left = [r for r in left if r.user not in under_way]
        if left:
            log.warning("finishing an interrupted forget: %d records", len(left))
            self.index.delete([int(r.id) for r in left])
            self.rewindow(left, removed=True)
            self.records.delete(left)

    def index_or_defer(
        self, bot: str, records: list[Record], ahead: Future[dict[int, list[float]]] | None = None
    ) -> None:
        """A write's points, without ever waiting for a model to load: words now, and a job for the
        meaning if the embedder is still cold. If the index is down the records stay pending and a job
        retries them (the sweep finds them even if the queue is down too)."""
        warm = is_warm(self.embedder)
        try:
            complete = self.index_records(records, wait=warm, ahead=ahead)
            if complete == len(records) or warm:
                return  # incomplete with a warm embedder: it is down, and the sweep retries later
            delay_s = 0
        except (IndexUnavailable, Unavailable) as exc:
            self.last_error = exc.message
            log.warning("deferring vectors of %d records: %s", len(records), exc.message)
            delay_s = 30
        try:
            self.queue.send(IndexJob(bot=bot, ids=sorted(int(r.id) for r in records)), delay_s=delay_s)
        except Exception:
            log.exception("could not queue an index job for %d records", len(records))

    def add_dense(self, records: list[Record], reads: LineReader | None = None) -> int:
        """Give existing points the current model's vector without touching their other models' vectors
        (re-embedding: a switch back reuses them); records still pending are indexed whole. Returns how
        many now have it (or need none). Which points have it is asked of the index, so re-embedding
        writes nothing to DynamoDB; the next chunk is embedded while the last one is stored. With mixing
        on, a point's own vector is also its searched one until `mix_own` mixes it (the second pass)."""
        waiting = [r for r in records if r.pending]
        pending = self.unforgotten(waiting)  # what an interrupted forget left needs no vector: counted done
        indexed = [r for r in records if not r.pending]
        done = (self.index_records(pending, reads=reads) if pending else 0) + len(waiting) - len(pending)
        todo = self._without_dense(indexed)
        done += len(indexed) - len(todo)
        added, complete = self._add_dense_pipelined(todo)
        done += added
        if complete and done == len(records):
            self.last_error = None  # vectors are filling in again
        return done

    def _without_dense(self, indexed: list[Record]) -> list[Record]:
        """The indexed records whose points lack the current model's vector (asked of the index)."""
        name = self.dense_name
        have = (
            self.index.with_dense(name, [r.id for r in indexed])
            if name is not None and indexed and self.dense_exists(name)
            else set()
        )
        return [r for r in indexed if r.id not in have and self.vector_text(r)]

    def _add_dense_pipelined(self, todo: list[Record]) -> tuple[int, bool]:
        """Embed chunk by chunk, the next one while the last one's vectors are stored; (how many points got
        their vector, whether all did: False when the embedder went down part-way)."""
        chunks = [todo[i : i + PIPELINE_CHUNK] for i in range(0, len(todo), PIPELINE_CHUNK)]
        name = self.dense_name
        if not chunks:
            return 0, True
        if name is None:
            return 0, False
        done = 0
        current = self._ahead.submit(self.dense_vectors, chunks[0])
        for i in range(len(chunks)):
            vectors = current.result()
            following = self._ahead.submit(self.dense_vectors, chunks[i + 1]) if i + 1 < len(chunks) else None
            if not vectors:
                if following is not None:
                    # the embedder is down: let the chunk in flight finish before returning
                    following.result()
                return done, False
            live = self.index.existing(list(vectors))  # a record removed meanwhile has no point to update
            kept = {i: v for i, v in vectors.items() if i in live}
            if self.mixing:  # own vectors: searched as they are until the second pass mixes them
                self._lined.update_points({}, {name: kept, own_vector_name(name): kept})
            else:
                self._lined.update_points({}, {name: kept})
            done += len(vectors)
            if following is None:
                break
            current = following
        return done, True

    def fill_vectors(self, bot: str, ids: list[int]) -> int:
        """Index job: write points for records that still exist and still wait for them (a record its own
        write, or an earlier job, finished meanwhile costs no embed); returns how many are complete."""
        # a context quoting someone forgotten is cleared first (that makes its record pending again)
        waiting = [r for r in self.unforgotten(list(self.records.batch_get(bot, ids).values())) if r.pending]
        complete = self.index_records(waiting)
        if complete < len(waiting):  # the embedder is down: these go back to the sweep, which queues them
            self.state.marks.lower_sweep_mark(bot, min(int(r.id) for r in waiting) - 1)
        return complete

    def sweep(self, batch: int = 100, grace_ms: int = 60_000, requeue_ms: int = REQUEUE_MS) -> int:
        """Queue index jobs for the records still waiting for vectors that no job was queued for yet;
        returns how many were queued. Records changed in the last `grace_ms` are left alone: their own write
        is still indexing them. A mark per bot keeps how far a pass has queued, so a lagging queue is not
        fed the same records every sweep; a pass begun `requeue_ms` ago starts again from the oldest
        (a job that long gone has run or dead-lettered: what still waits was lost)."""
        now = now_ms()
        swept = [
            self._sweep_bot(bot, now, batch, grace_ms, requeue_ms) for bot in self.records.pending.bots()
        ]
        # how many records the sweep found still waiting for their vectors (from each bot's mark, at most
        # SWEEP_LIMIT a bot): a backlog that grows means the embedder or Qdrant is not keeping up
        record_value("pendingRecords", sum(found for _, found in swept))
        return sum(queued for queued, _ in swept)

    def _sweep_bot(self, bot: str, now: int, batch: int, grace_ms: int, requeue_ms: int) -> tuple[int, int]:
        """One bot's share of the sweep, from its mark (or the oldest, for a pass begun too long ago): how
        many records it queued, and how many pending it found."""
        queued = 0
        mark = self.state.marks.sweep_mark(bot)
        after, since = mark if mark is not None and now - mark[1] < requeue_ms else (None, now)
        ids = self.records.pending.ids(bot, SWEEP_LIMIT, after=after)
        through, held_back = after, None
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            sent, young = self._queue_due(bot, chunk, now - grace_ms)
            queued += sent
            held_back = held_back or young
            through = chunk[-1]
        if held_back is not None:  # its own write may still fail: the next sweep looks again from it
            through = max(held_back - 1, after or 0) or None
        if through is not None and through != after:
            self.state.marks.set_sweep_mark(bot, through, since)
        return queued, len(ids)

    def _queue_due(self, bot: str, chunk: list[int], cutoff: int) -> tuple[int, int | None]:
        """One index job for the records of `chunk` still pending and unchanged since `cutoff`; (how many
        were queued, the first one changed since, whose own write is still indexing it)."""
        found = self.records.batch_get(bot, chunk)
        waiting = [found[i] for i in chunk if i in found and found[i].pending]
        due = [int(r.id) for r in waiting if int(r.updated_at) <= cutoff]
        young = next((int(r.id) for r in waiting if int(r.updated_at) > cutoff), None)
        if due:
            self.queue.send(IndexJob(bot=bot, ids=sorted(due)))
        return len(due), young
