"""The vector index as derived data. `Indexer` writes records' points (words, and the current model's
meaning) and keeps pending records moving (index jobs, the sweep); `IndexKeeper` keeps the index a
faithful copy of the records (DynamoDB is the system of record): reconcile both ways, and rebuild
from the records, a page at a time."""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .embedders import Embedder, NoEmbedder, own_vector_name, vector_name
from .errors import EmbedderUnavailable, IndexUnavailable, Unavailable
from .jobs import IndexJob, JobQueue
from .observability import timed
from .ports import StatePort
from .retrieval import DEFAULT, Retrieval, date_words
from .shapes import payload
from .store import KINDS, LineReads, Record, RecordStore, now_ms
from .vectors import IndexPoint, Scope, VectorIndex
from .words import SparseVector, WordVectorizer

log = logging.getLogger(__name__)
PAGE = 200
# Re-embedding embeds the next chunk while the previous one's vectors are stored (DynamoDB and Qdrant
# wait on I/O while torch computes): 60 % -> 80 %+ of the embedder's own throughput here.
PIPELINE_CHUNK = 250
# The sweep queues at most this many of a bot's pending records a pass, oldest first, and starts its pass
# again from the oldest this long after it began (SQS: 6 x 180 s visibility x 3 receives, then the DLQ).
SWEEP_LIMIT = 10_000
REQUEUE_MS = 60 * 60_000


def _mix(own: list[float], context: list[float], weight: float) -> list[float]:
    """own + weight * context, back to unit length."""
    mixed = [a + weight * b for a, b in zip(own, context, strict=False)]
    norm = math.sqrt(sum(x * x for x in mixed)) or 1.0
    return [x / norm for x in mixed]


def _mean(vectors: list[list[float]]) -> list[float]:
    """The mean of vectors, at unit length."""
    mean = [sum(xs) / len(vectors) for xs in zip(*vectors, strict=True)]
    norm = math.sqrt(sum(x * x for x in mean)) or 1.0
    return [x / norm for x in mean]


@dataclass
class _Held:
    """What the index holds of the records around a write: which points exist, their own vectors (and the
    write's own just embedded), and which of them held no own vector beside the searched one yet."""

    owns: dict[int, list[float]] = field(default_factory=dict)
    live: set[int] = field(default_factory=set)
    unkept: set[int] = field(default_factory=set)

    def know(self, written: list[Record], own: dict[int, list[float]]) -> None:
        """A write's own vectors just embedded replace what the index held for its points; a written record
        without one (the embedder down) counts as having none: the vector its point held was made of what
        it said before (a cleared context, a changed text), and is mixed into no window."""
        for r in written:
            self.owns.pop(int(r.id), None)
            self.unkept.discard(int(r.id))
        self.owns.update(own)


def _order(r: Record) -> tuple[int, int]:
    return int(r.created_at), int(r.id)


def _label(action: str) -> str:
    """What the progress calls a pass of a maintenance action."""
    return "rebuilding" if action == "rebuild" else "reconciling"


def is_warm(embedder: Embedder | NoEmbedder) -> bool:
    """Whether the embedder answers without loading a model first (remote ones always do)."""
    return bool(getattr(embedder, "warm", True))


class Indexer:
    """Writes points for records and marks them indexed; a record stays pending (and a job or the sweep
    finishes it) whenever the index, or the embedder, cannot be had right now."""

    def __init__(
        self,
        records: RecordStore,
        index: VectorIndex,
        embedder: Embedder | NoEmbedder,
        queue: JobQueue,
        words: WordVectorizer,
        state: StatePort,
        message_vector_chars: int = 8000,
        retrieval: Retrieval = DEFAULT,
    ):
        self.records = records
        self.state = state
        self.retrieval = retrieval
        self.index = index
        self.embedder = embedder
        self.queue = queue
        self.words = words
        self.message_vector_chars = message_vector_chars
        self.last_error: str | None = None
        self.dense_ready: set[str] = set()
        self._ahead = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed-ahead")
        # A write's windows are read from DynamoDB while its text is embedded: the reads cost it no time
        self._windows = ThreadPoolExecutor(max_workers=2, thread_name_prefix="windows")

    @property
    def dense_name(self) -> str | None:
        """The named vector of the current embedding model, or None when vectors are off."""
        if isinstance(self.embedder, NoEmbedder):
            return None
        return vector_name(self.embedder.provider, self.embedder.model)

    def vector_text(self, r: Record) -> str | None:
        """The text a record's dense vector is made of (None: no dense vector)."""
        if r.kind == "message":
            return r.text[: self.message_vector_chars] if self.message_vector_chars > 0 and r.text else None
        return r.text

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
        """Each record's dense vector: its own text's embedding, mixed with its conversation context's
        (a chat reply means little without what it answers). One batched embed call; None texts skipped."""
        own = {int(r.id): self.vector_text(r) for r in records}
        context = {
            int(r.id): r.context[: self.message_vector_chars] for r in records if r.context and own[int(r.id)]
        }
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
            memory_id: _mix(by_text[text], by_text[context[memory_id]], self.retrieval.dense_context)
            if memory_id in context
            else by_text[text]
            for memory_id, text in own.items()
            if text
        }

    # ----- windows: the turns around a memory, a field of its words ---------------------------------

    @property
    def window_turns(self) -> int:
        """How many turns each side a window holds (0: windows are off)."""
        on = self.retrieval.words_window or self.mixing
        return self.retrieval.window_turns if on else 0

    @property
    def mixing(self) -> bool:
        """Whether a point's searched meaning is mixed with its window's (its own is kept beside it)."""
        return bool(self.retrieval.meaning_window) and self.dense_name is not None

    def _lines(
        self,
        records: list[Record],
        removed: bool = False,
        reads: LineReads | None = None,
        own_windows_only: bool = False,
        beside: Sequence[Record] = (),
    ) -> dict[str, list[Record]]:
        """The lines of these records, reaching far enough for their neighbours' windows too (with
        `own_windows_only`, for their own), without the records of users forgotten since they arrived (a
        window never brings back a forgotten person's words); `removed`: these records are leaving, and
        are left out even where the index still lists them; `reads`: a maintenance step's line reads,
        shared by its pages; `beside`: records it read a moment ago, not read again."""
        reach = self.window_turns if own_windows_only else 2 * self.window_turns
        lines = self.records.line_around(records, reach, reads, beside)
        users = {r.user for line in lines.values() for r in line if r.user}
        gone = self.state.tombstones.when(records[0].bot, users) if users else {}
        leaving = {int(r.id) for r in records} if removed else set()
        out = {
            name: [
                r
                for r in line
                if int(r.id) not in leaving and not (r.user in gone and gone[r.user] >= r.arrived)
            ]
            for name, line in lines.items()
        }
        if not removed:  # a record written a moment ago may not be in the (eventually consistent) index yet
            for r in records:
                held = out.get(r.line or "")
                if held is not None and all(int(x.id) != int(r.id) for x in held):
                    held.append(r)
                    held.sort(key=_order)
        return out

    def _forgotten_since(self, lines: dict[str, list[Record]]) -> bool:
        """Whether someone with a record in these lines (read a moment ago, the forgotten left out) has been
        forgotten since: their tombstone is written before their forget rewrites the windows."""
        everyone = [r for line in lines.values() for r in line if r.user]
        if not everyone:
            return False
        gone = self.state.tombstones.when(everyone[0].bot, {r.user for r in everyone if r.user})
        return any(r.user in gone and gone[r.user] >= r.arrived for r in everyone)

    def _around(self, line: list[Record], at: int) -> list[Record]:
        turns = self.window_turns
        return line[max(0, at - turns) : at] + line[at + 1 : at + 1 + turns]

    def _window(self, line: list[Record], at: int) -> str | None:
        if not self.retrieval.words_window:
            return None
        return " ".join(r.text for r in self._around(line, at))

    def _meaning(self, line: list[Record], at: int, owns: dict[int, list[float]]) -> list[float] | None:
        """The searched meaning of `line[at]`: its own vector moved towards the mean of its window's own
        vectors (None: it has no vector yet)."""
        own = owns.get(int(line[at].id))
        if own is None:
            return None
        around = [owns[int(r.id)] for r in self._around(line, at) if int(r.id) in owns]
        return _mix(own, _mean(around), self.retrieval.meaning_window) if around else own

    def _held(self, lines: dict[str, list[Record]], known: dict[int, list[float]]) -> _Held:
        """What the index holds of the records in these lines, in one read: which points exist and (mixing)
        their own vectors, beside the `known` ones just embedded. A point from before mixing has only its
        searched vector, which is its own then (it is written back beside the mixed one)."""
        held = _Held(owns=dict(known))
        wanted = sorted({int(r.id) for line in lines.values() for r in line if int(r.id) not in known})
        if not wanted:
            return held
        name = self.dense_name
        own_name = own_vector_name(name) if name is not None else ""
        # asking for a vector the index lacks fails
        names = [n for n in (own_name, name) if n and self.mixing and self.dense_exists(n)]
        for memory_id, named in self.index.dense_of(names, wanted).items():
            held.live.add(memory_id)
            if own_name in named:
                held.owns[memory_id] = named[own_name]
            elif name in named:
                held.owns[memory_id] = named[name]
                held.unkept.add(memory_id)
        return held

    def _read_around(
        self, records: list[Record], reads: LineReads | None = None, own_windows_only: bool = False
    ) -> tuple[dict[str, list[Record]], _Held]:
        """A write's lines and what the index holds of them: read while its text is embedded."""
        lines = self._lines(records, reads=reads, own_windows_only=own_windows_only)
        return lines, self._held(lines, {})

    def windows(self, records: list[Record], lines: dict[str, list[Record]]) -> dict[int, str]:
        """Each record's window as one text: the turns around it in its line."""
        out = {}
        for r in records:
            line = lines.get(r.line or "", [])
            at = next((n for n, x in enumerate(line) if int(x.id) == int(r.id)), None)
            text = self._window(line, at) if at is not None else None
            if text is not None:
                out[int(r.id)] = text
        return out

    def rewindow(self, records: list[Record], removed: bool = False, with_self: bool = False) -> int:
        """The records around these ones (changed, or `removed`; and these, `with_self`) get their windows
        again: their words are rewritten, and their meaning mixed again from the vectors they hold (no new
        embed). Returns how many points were rewritten."""
        if not self.window_turns or not records:
            return 0
        return self._rewrite_around(records, self._lines(records, removed), with_self=with_self)

    def mix_own(
        self, records: list[Record], reads: LineReads | None = None, beside: Sequence[Record] = ()
    ) -> int:
        """A re-embed's second pass: each of these records' searched meaning mixed again from its window's
        own vectors, which the first pass wrote for every record; the points around are mixed by their own
        pages, so each point is written once (the first pass used to mix every neighbour again as each of
        its window's vectors arrived: ~2 x turns + 1 writes a point). `beside`: the pages before and after
        these, which hold most of their windows (only the words' order and authors are read of them: the
        vectors come from the index). Returns how many were written."""
        if not self.mixing or not records:
            return 0
        lines = self._lines(records, reads=reads, own_windows_only=True, beside=beside)
        held = self._held(lines, {})
        wanted = {int(r.id) for r in records}
        mine = {
            int(r.id): (line, n)
            for line in lines.values()
            for n, r in enumerate(line)
            if int(r.id) in wanted and int(r.id) in held.live
        }
        self._update_points({}, self._remixed(mine, held))
        return len(mine)

    def _rewrite_around(
        self,
        records: list[Record],
        lines: dict[str, list[Record]],
        held: _Held | None = None,
        with_words: bool = True,
        with_self: bool = False,
    ) -> int:
        around = self._neighbourhood(records, lines, with_self)
        if not around:
            return 0
        held = held or self._held(lines, {})
        # a neighbour still waiting for its point gets it whole
        live = {i: at for i, at in around.items() if i in held.live}
        words: dict[int, SparseVector] = {}
        if with_words:
            words = {i: self._words(line[n], self._window(line, n)) for i, (line, n) in live.items()}
        self._update_points(words, self._remixed(live, held))
        return len(live)

    def _update_points(
        self, words: dict[int, SparseVector], dense: dict[str, dict[int, list[float]]]
    ) -> None:
        """Replace vectors of existing points. A point deleted since it was read (a forget or a delete
        beside this write: Qdrant refuses the whole update) is left out, and the rest written."""
        try:
            self.index.set_vectors(words, dense)
        except IndexUnavailable:
            asked = set(words) | {i for vectors in dense.values() for i in vectors}
            live = self.index.existing(list(asked))
            if live == asked:
                raise
            self.index.set_vectors(
                {i: v for i, v in words.items() if i in live},
                {name: {i: v for i, v in vectors.items() if i in live} for name, vectors in dense.items()},
            )

    def _neighbourhood(
        self, records: list[Record], lines: dict[str, list[Record]], with_self: bool
    ) -> dict[int, tuple[list[Record], int]]:
        """The records within a window of these ones (and these, `with_self`), with their line and place."""
        turns = self.window_turns
        skip = set() if with_self else {int(r.id) for r in records}
        by_line: dict[str, list[Record]] = {}
        for r in records:
            by_line.setdefault(r.line or "", []).append(r)
        around: dict[int, tuple[list[Record], int]] = {}
        for line_name, written in by_line.items():
            line = lines.get(line_name)
            if not line:
                continue
            positions = {int(x.id): n for n, x in enumerate(line)}
            orders = [_order(x) for x in line]
            for r in written:  # a removed record is gone from its line: its place is where it would sort
                at = positions.get(int(r.id), bisect.bisect_left(orders, _order(r)))
                for n in range(max(0, at - turns), min(len(line), at + turns + 1)):
                    if int(line[n].id) not in skip:
                        around[int(line[n].id)] = (line, n)
        return around

    def _remixed(
        self, around: dict[int, tuple[list[Record], int]], held: _Held
    ) -> dict[str, dict[int, list[float]]]:
        """The searched meaning of each of these points mixed again (mixing on), and the own vector of
        those that held none yet (a point from before mixing) written beside it."""
        name = self.dense_name
        if not self.mixing or name is None or not around:
            return {}
        mixed: dict[int, list[float]] = {}
        for memory_id, (line, n) in around.items():
            vector = self._meaning(line, n, held.owns)
            if vector is not None:
                mixed[memory_id] = vector
        kept = {i: held.owns[i] for i in mixed if i in held.unkept}
        return {name: mixed, own_vector_name(name): kept} if kept else ({name: mixed} if mixed else {})

    def _meanings(
        self, records: list[Record], lines: dict[str, list[Record]], held: _Held
    ) -> dict[int, dict[str, Any]]:
        """Each record's dense vectors as its point stores them: its own, and (mixing) the searched one
        mixed with its window's (`held.owns` holds the records' own vectors and their neighbours')."""
        name = self.dense_name
        if name is None:
            return {}
        out: dict[int, dict[str, Any]] = {}
        for r in records:
            memory_id = int(r.id)
            own = held.owns.get(memory_id)
            if own is None:
                continue
            if not self.mixing:
                out[memory_id] = {name: own}
                continue
            line = lines.get(r.line or "", [])
            at = next((n for n, x in enumerate(line) if int(x.id) == memory_id), None)
            mixed = self._meaning(line, at, held.owns) if at is not None else None
            out[memory_id] = {name: mixed or own, own_vector_name(name): own}
        return out

    def _words(self, r: Record, window: str | None) -> SparseVector:
        return self.words.document(
            r.text,
            context=r.context,
            date=date_words(int(r.created_at)) if self.retrieval.date_terms else None,
            window=window,
        )

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
        reads: LineReads | None = None,
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
            self._windows.submit(self._read_around, records, reads, own_only) if self.window_turns else None
        )
        dense_by_id = ahead.result() if ahead is not None else self.dense_vectors(records, wait)
        name = self.dense_name
        lines, held = reading.result() if reading is not None else ({}, _Held())
        held.know(records, dense_by_id)
        windows = self.windows(records, lines)
        meanings = self._meanings(records, lines, held)
        points = [
            IndexPoint(
                id=int(r.id),
                payload=payload(r),
                words=self._words(r, windows.get(int(r.id))),
                dense=meanings.get(int(r.id), {}),
            )
            for r in records
        ]
        self.index.upsert(points)
        if lines:  # the turns before (and after) these ones now have them in their windows
            if not own_only:
                self._rewrite_around(records, lines, held, with_words=not whole_pass)
            if self._forgotten_since(lines):
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
        vanished = [int(r.id) for r in self.records.mark_indexed_many(done)]
        complete = len(done) - len(vanished)
        finished = {int(r.id) for r, _ in done}
        # a record marked indexed whose point is now incomplete (a rebuild with the embedder down) waits
        # for the sweep again; its step, retried from its cursor, covers a crash before this mark
        unmarked = [r for r in records if not r.pending and int(r.id) not in finished]
        still = {int(r.id) for r in self.records.mark_pending_many(unmarked)}
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

    def add_dense(self, records: list[Record], reads: LineReads | None = None) -> int:
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
                self._update_points({}, {name: kept, own_vector_name(name): kept})
            else:
                self._update_points({}, {name: kept})
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
        queued = 0
        now = now_ms()
        for bot in self.records.bots_with_pending():
            mark = self.state.marks.sweep_mark(bot)
            after, since = mark if mark is not None and now - mark[1] < requeue_ms else (None, now)
            ids = self.records.pending_ids(bot, SWEEP_LIMIT, after=after)
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
        return queued

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


@dataclass
class Progress:
    """What an index pass has done so far (for /healthz and the progress endpoint)."""

    action: str = "idle"  # idle | reconciling | rebuilding
    last: str | None = None  # the pass that finished last (reconciling | rebuilding)
    records: int = 0
    points: int = 0
    reindexed: int = 0
    orphans_deleted: int = 0
    lined: int = 0  # records stored before windows given their line (and windows)
    parts_left: int = 0  # of a pass run as jobs (IndexKeeper.step): parts queued and not done yet
    error: str | None = None
    started_ms: int | None = None
    finished_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class IndexKeeper:
    """Reconcile and rebuild, through one indexer. Pages are bounded, so each call fits a worker job."""

    indexer: Indexer
    progress: Progress = field(default_factory=Progress)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # parts of passes run as jobs, queued here and not done yet, per pass ("rebuilding", "reconciling"):
    # a pass run inline meanwhile (the local stack's check at start) replaces `progress`, never these
    _parts: dict[str, int] = field(default_factory=dict)

    def _running(self) -> str:
        """What the progress says runs once a pass ends: a pass whose parts are still out, or nothing."""
        return next((label for label, left in self._parts.items() if left), "idle")

    def bots(self) -> list[str]:
        """Every bot that has records."""
        return self.indexer.records.bots()

    def _pages(self, bot: str) -> Iterator[list[Record]]:
        """Every record of a bot, a page at a time, each kind newest first."""
        for kind in KINDS:
            before = None
            while page := self.indexer.records.page(bot, kind, before, PAGE):
                self.progress.records += len(page)
                yield page
                if len(page) < PAGE:
                    break
                before = int(page[-1].id)

    def _reindex(
        self, records: list[Record], reads: LineReads | None = None, whole_pass: bool = False
    ) -> None:
        """Write these records' points again (those left incomplete, the embedder down, are marked pending
        for the sweep; one deleted meanwhile has its point taken back); `whole_pass`: a rebuild's page."""
        records = self.indexer.unforgotten(records)
        if records:
            self.indexer.index_records(records, reads=reads, whole_pass=whole_pass)
        self.progress.reindexed += len(records)

    # ----- reconcile ----------------------------------------------------------------------------------

    def reconcile_points(self, bot: str) -> int:
        """Delete the bot's points that have no record (left by a crash between the two stores)."""
        before = self.progress.orphans_deleted
        after = self._orphans_page(bot, None)
        while after is not None:
            after = self._orphans_page(bot, after)
        return self.progress.orphans_deleted - before

    def reconcile_records(self, bot: str) -> int:
        """Re-index the bot's records marked indexed whose point is missing; returns how many. Records
        stored before windows get their line on the way, and they and the points around them their
        windows."""
        return sum(self._reconcile_page(page) for page in self._pages(bot))

    def _reconcile_page(self, page: list[Record], reads: LineReads | None = None) -> int:
        indexed = [r for r in page if not r.pending]
        held = self.indexer.index.existing([int(r.id) for r in indexed])
        missing = [r for r in indexed if int(r.id) not in held]
        self._reindex(missing, reads)
        unlined = [r for r in page if r.line and r.stored_line != r.line]
        if unlined:
            self.progress.lined += len(self._give_lines(unlined))
        return len(missing)

    # ----- bounded steps: a pass split into jobs that each end in time and carry on from a cursor --------

    def begin_parts(self, action: str, parts: int) -> None:
        """A pass run as jobs queued `parts` more parts (0: a part of it runs here): this process's
        progress counts them down. A part of the pass that finished here last carries on its counts."""
        label = _label(action)
        with self._lock:
            if self.progress.action != label:
                if parts or self.progress.last != label:
                    self.progress = Progress(action=label, started_ms=now_ms(), last=self.progress.last)
                self.progress.action = label
            self._parts[label] = self._parts.get(label, 0) + parts
            self.progress.parts_left = sum(self._parts.values())

    def step(
        self,
        action: str,
        bot: str,
        part: str,
        cursor: int | None,
        budget_s: float,
        shard: int | None = None,
    ) -> int | None:
        """One bounded step of a reconcile or rebuild of one part of a bot (a kind's records under one of
        its keys, or under all with no `shard`, newest first; or its points, in id order): pages until
        `budget_s` has passed; returns where the next step starts (None: the part is done). Each page is
        idempotent, so a step retried from its cursor is safe."""
        self.begin_parts(action, 0)  # a part resumed in a process that did not queue it shows too
        following = self._step(action, bot, part, cursor, budget_s, shard)
        if following is None:
            label = _label(action)
            with self._lock:
                self._parts[label] = max(0, self._parts.get(label, 0) - 1)
                self.progress.parts_left = sum(self._parts.values())
                if self._parts[label] == 0:
                    self.progress.last, self.progress.finished_ms = label, now_ms()
                    self.progress.action = self._running()
        return following

    def _step(
        self, action: str, bot: str, part: str, cursor: int | None, budget_s: float, shard: int | None
    ) -> int | None:
        if part == "points":
            deadline = time.monotonic() + budget_s
            after = cursor
            while True:
                after = self._orphans_page(bot, after)
                if after is None or time.monotonic() >= deadline:
                    return after

        reads = LineReads()  # the step's pages meet the same lines: each is read once for all of them

        def one(page: list[Record]) -> None:
            self.progress.records += len(page)
            if action == "rebuild":
                self._reindex(page, reads, whole_pass=True)
            else:
                self._reconcile_page(page, reads)

        return self.indexer.records.walk(bot, part, cursor, PAGE, budget_s, one, shard=shard)

    def _orphans_page(self, bot: str, after: int | None) -> int | None:
        """Delete the orphan points of one page of the bot's points; where the next page starts."""
        ids, following = self.indexer.index.scroll_ids(Scope(bot=bot), after, PAGE)
        if ids:
            present = self.indexer.records.batch_get(bot, ids)
            orphans = [i for i in ids if i not in present]
            if orphans:
                self.indexer.index.delete(orphans)
            self.progress.points += len(ids)
            self.progress.orphans_deleted += len(orphans)
        return following

    def _give_lines(self, records: list[Record]) -> list[Record]:
        lined = self.indexer.records.give_lines(self.indexer.unforgotten(records))
        self.indexer.rewindow(lined, with_self=True)
        return lined

    def reconcile(self, bot: str | None = None) -> dict[str, Any]:
        """Both ways, for one bot or all: orphan points deleted, missing points written again."""
        return self._pass("reconciling", bot, lambda b: (self.reconcile_points(b), self.reconcile_records(b)))

    # ----- rebuild ------------------------------------------------------------------------------------

    def rebuild(self, bot: str | None = None) -> dict[str, Any]:
        """Write every record's point again from DynamoDB (the collection may be empty or gone)."""

        def one(b: str) -> None:
            for page in self._pages(b):
                self._reindex(page, whole_pass=True)
            self.reconcile_points(b)

        return self._pass("rebuilding", bot, one)

    def needs_rebuild(self) -> bool:
        """An empty index next to records: the index was lost (deleted, or a new Qdrant)."""
        if self.indexer.index.count(Scope(bot=None)) > 0:
            return False
        return any(self.indexer.records.page(b, k, None, 1) for b in self.bots() for k in KINDS)

    def _pass(self, action: str, bot: str | None, run: Callable[[str], object]) -> dict[str, Any]:
        with self._lock:
            self.progress = Progress(action=action, started_ms=now_ms(), parts_left=sum(self._parts.values()))
            try:
                for b in [bot] if bot else self.bots():
                    run(b)
            except Exception as exc:  # Qdrant or DynamoDB down: say so, the next pass picks it up
                self.progress.error = str(exc)
                log.warning("index %s stopped: %s", action, exc)
            finally:
                self.progress.finished_ms = now_ms()
                self.progress.last = action
                done = self.progress.as_json()
                self.progress.action = self._running()
            return done
