"""Writing memories: facts and chat messages (idempotent, checked against tombstones at the moment of
writing), changes, removals, and the release of a person's words from the contexts that quote them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from .contexts import Context, linked, thread_contexts, unnamed_replies
from .domain import (
    INGEST_CHUNK,
    MAX_BATCH,
    MAX_CONTEXT_CHARS,
    NO_TERMS,
    Added,
    ChatMessage,
    Memory,
    SavedBy,
    Terms,
    check_name,
    required_name,
    rewritten,
)
from .errors import Forgotten, InvalidInput, NotFound, Unavailable
from .indexing import Indexer
from .jobs import IndexJob
from .parts import MemoryParts
from .ports import CarriersPort, RecordsPort
from .record import (
    SOURCE_EDIT,
    Listing,
    Paging,
    carrier_notes,
    quotes_any,
    record_line,
    versions_after,
    whose_words,
)
from .store import (
    Duplicate,
    Record,
    fact_key,
    fact_tail,
    new_record,
    now_ms,
    source_key,
)
from .text import clean_fact, format_memory_id

log = logging.getLogger(__name__)


def check_batch(messages: list[ChatMessage]) -> None:
    """A batch of messages engram takes: at most MAX_BATCH, each source id once."""
    if len(messages) > MAX_BATCH:
        raise InvalidInput(f"at most {MAX_BATCH} messages per batch")
    keys = [source_key(m.source_id) for m in messages]
    if len(set(keys)) != len(keys):
        raise InvalidInput("a batch names the same source message id twice")


class MemoryWrites:
    """The write half of the memory service: facts and messages in, changes, removals, and words leaving
    the contexts that quote them."""

    def __init__(self, parts: MemoryParts, indexer: Indexer) -> None:
        self.records, self.state, self.index = parts.records, parts.state, parts.index
        self.queue, self.words = parts.queue, parts.words
        self.indexer = indexer
        # called with the bot after a memory is removed or its words changed (the local stack rewrites
        # its files without the old words)
        self.change_hooks: list[Callable[[str], None]] = []

    def changed(self, bot: str) -> None:
        """A memory of the bot was removed or changed: recall caches everywhere are stale (the mark), and
        whoever keeps files of the old words is told."""
        self.state.marks.note_change(bot, now_ms())
        for hook in self.change_hooks:
            hook(bot)

    def refused(self, bot: str, users: Iterable[str | None], origin: int) -> set[str]:
        """Which of these users were forgotten at or after `origin` (when the write was made, asked for or
        queued): their words are dropped, whatever path brings them (tombstones, read at write time)."""
        return {
            u for u, at in self.state.tombstones.when(bot, {u for u in users if u}).items() if at >= origin
        }

    def add_fact(  # noqa: PLR0913 - keyword-only scopes and times; to become one typed fact to add
        self,
        bot: str,
        text: str,
        *,
        user: str | None = None,
        server: str | None = None,
        project: str | None = None,
        saved_by: SavedBy = "owner",
        created_at: int | None = None,
        updated_at: int | None = None,
        defer_vectors: bool = False,
        origin: int | None = None,
        source_id: str | None = None,
        terms: Terms = NO_TERMS,
        versions: list[dict[str, Any]] | None = None,
        content: dict[str, Any] | None = None,
    ) -> tuple[Memory, bool]:
        """Add a fact; (memory, True) when new, (the memory already there, False) for the same text.
        `origin`: when the fact was asked for (a job's queue time); Forgotten if its user was forgotten
        since. `source_id`: where it was said (a LibreChat chat and message), for the source to correct.
        `terms`: its metadata and expiry (the memory already there keeps its own). `content`: what the
        source says of its author (their names: engram.names), kept beside the text."""
        bot = required_name("bot", bot)
        user, server, project = (
            check_name("userId", user),
            check_name("serverId", server),
            check_name("project", project),
        )
        text = clean_fact(text)
        terms = terms.checked(now_ms())
        origin = origin if origin is not None else now_ms()
        self._refuse_forgotten(bot, user, origin, "after this was asked for")
        key = fact_key(server, project, user, text)
        existing = self.records.claims.find_unique(bot, key)
        if existing is not None and existing.expired(now_ms()):  # not swept yet: it goes, this one is new
            self._remove_records(bot, [existing])
        elif existing is not None:
            return Memory.from_record(existing), False
        created, updated = given_times(created_at, updated_at, now_ms())
        self.records.register_bot(bot)
        tail = fact_tail(server, project, user)
        memory_id = self.records.next_id()
        context, author, source = self._fact_context(bot, tail, created)
        record = new_record(
            bot,
            memory_id,
            "fact",
            text,
            user=user,
            saved_by=saved_by,
            created_at=created,
            updated_at=updated,
            server=server,
            project=project,
            unique_key=key,
            context=context,
            context_author=author,
            context_source=source,
            source_id=source_id,
            metadata=terms.metadata,
            expires_at=terms.expires_at,
            versions=versions,
            content=content,
        )
        try:
            self.records.create(record)
        except Duplicate as dup:  # someone added the same text a moment ago
            return self._wait_for(bot, dup.memory_id), False
        self.records.carriers.note([record])
        self.state.expiries.note([record])
        if self.indexer.retrieval.fact_context_minutes and terms.expires_at is None:  # (as _advance_threads)
            self.records.tails.advance(bot, tail, created, text[:MAX_CONTEXT_CHARS], user, memory_id)
        try:  # a forget landed while we wrote: it wins
            self._refuse_forgotten(bot, user, origin, "while this was stored")
        except Forgotten:
            self._undo(bot, [record])
            raise
        self._index(bot, [record], defer_vectors)
        return Memory.from_record(record), True

    def _refuse_forgotten(self, bot: str, user: str | None, origin: int, when: str) -> None:
        """Forgotten if the user was forgotten since `origin` (what a write asked for then may not store)."""
        if user and self.refused(bot, {user}, origin):
            raise Forgotten(f"user {user!r} was forgotten {when}; it is not stored")

    def add_messages(
        self,
        bot: str,
        messages: list[ChatMessage],
        defer_vectors: bool = False,
        origin: int | None = None,
        stored_tails: bool = True,
    ) -> Added:
        """Store chat messages in one batch, idempotent by source message id. `defer_vectors`: points are
        written by an index job (an import), not before the answer. `origin`: when the batch was asked for
        (a job's queue time); messages of users forgotten since are dropped, and a message whose context
        quotes one is stored without it. `stored_tails=False` (a page older than what is stored): contexts
        come from earlier messages of the batch only, never from a thread's newest stored message."""
        bot = required_name("bot", bot)
        if not messages:
            return Added([], [])
        check_batch(messages)
        origin = origin if origin is not None else now_ms()
        messages = self._without_forgotten(bot, messages, origin)
        unnamed_replies(self.state, self.records.claims, bot, messages)
        keys = [source_key(m.source_id) for m in messages]
        known = self.records.claims.find_uniques(bot, keys)
        records = self._new_records(
            bot, [m for m, k in zip(messages, keys, strict=True) if k not in known], stored_tails
        )
        # Vectors are made while DynamoDB stores the records, a chunk at a time, so each chunk's points and
        # marks are written while the next chunk embeds (in-process: 68 % -> 87 % of the embedder alone)
        chunks = [records[i : i + INGEST_CHUNK] for i in range(0, len(records), INGEST_CHUNK)]
        aheads = [] if defer_vectors else [self.indexer.embed_ahead(chunk) for chunk in chunks]
        written = self.records.create_many(records)
        quoting = {id(r) for r in written if r.context}
        kept = self._settle(bot, written, origin)
        if defer_vectors:
            self._index(bot, kept, True)
            return self._outcome(bot, keys, known, kept)
        # a context _settle cleared (its author forgotten meanwhile) was embedded ahead with their words
        cleared = {id(r) for r in kept if id(r) in quoting and not r.context}
        for n, chunk in enumerate(chunks):
            ahead = aheads[n]
            if ahead is not None and any(id(r) in cleared for r in chunk):
                ahead.cancel()
                aheads[n] = None
        self._index_chunks(bot, chunks, aheads, kept)
        return self._outcome(bot, keys, known, kept)

    def _without_forgotten(self, bot: str, messages: list[ChatMessage], origin: int) -> list[ChatMessage]:
        """The batch less the messages of users forgotten since `origin`; a context quoting one is left
        out."""
        gone = self.refused(bot, {m.user for m in messages} | {m.context_author for m in messages}, origin)
        if not gone:
            return messages
        kept = [m for m in messages if m.user not in gone]
        for m in kept:
            if m.context_author in gone:
                m.context, m.context_author, m.context_source = "", None, None
        return kept

    def _new_records(self, bot: str, fresh: list[ChatMessage], stored_tails: bool) -> list[Record]:
        """Records for the messages not stored yet, each with its context (given, or its thread's)."""
        if not fresh:
            return []
        self.records.register_bot(bot)
        stamp = now_ms()
        ids = self.records.next_ids(len(fresh))
        threads = thread_contexts(self.records.tails, bot, fresh, ids, stamp, stored_tails)
        out = []
        for m, memory_id, thread_context in zip(fresh, ids, threads, strict=True):
            given = (m.context, m.context_author, m.context_source)
            context, author, source = thread_context if m.context is None else linked(given, thread_context)
            out.append(
                new_record(
                    bot,
                    memory_id,
                    "message",
                    m.text,
                    user=m.user,
                    saved_by=m.saved_by,
                    created_at=m.created_at or stamp,
                    updated_at=m.updated_at or stamp,
                    content=m.content,
                    server=m.server,
                    project=m.project,
                    source_id=m.source_id,
                    unique_key=source_key(m.source_id),
                    thread=m.thread,
                    context=context or None,
                    context_author=author if context else None,
                    context_source=source if context else None,
                    metadata=m.metadata,
                    expires_at=m.expires_at,
                    versions=m.versions,
                )
            )
        return out

    def _index_chunks(
        self,
        bot: str,
        chunks: list[list[Record]],
        aheads: list[Future[dict[int, list[float]]] | None],
        kept: list[Record],
    ) -> None:
        """Points for the records kept, chunk by chunk, each with the vectors embedded ahead for it."""
        stored = {r.id for r in kept}
        for chunk, ahead in zip(chunks, aheads, strict=True):
            mine = [r for r in chunk if r.id in stored]
            if mine:
                self.indexer.index_or_defer(bot, mine, ahead)
            elif ahead is not None:
                ahead.cancel()

    def _outcome(self, bot: str, keys: list[str], known: dict[str, int], kept: list[Record]) -> Added:
        """Every message's memory in input order: the ones written now, and the ones already there."""
        by_key = {str(r.unique_key): r for r in kept}  # a message's record always holds its key
        missing = [k for k in keys if k not in by_key and k not in known]
        if missing:  # lost a race to a concurrent import of the same messages
            known.update(self.records.claims.find_uniques(bot, missing))
        every: dict[str, Record] = {**self._held(bot, known), **by_key}
        memories = {k: Memory.from_record(every[k]) for k in keys if k in every}
        return Added(list(memories.values()), [memories[k] for k in keys if k in by_key])

    def _held(self, bot: str, known: dict[str, int]) -> dict[str, Record]:
        """The records holding these unique keys, by key (those gone meanwhile left out)."""
        stored = self.records.batch_get(bot, list(known.values()))
        return {k: stored[i] for k, i in known.items() if i in stored}

    def _settle(self, bot: str, written: list[Record], origin: int) -> list[Record]:
        """After a batch is written: note whose words each context carries, move the thread tails on, and
        let a forget that landed meanwhile win (its user's records go, contexts quoting them are cleared).
        Returns the records that stay. The tails move before the tombstones are read: a forget that lands
        after that read finds the tails already written, and one before it has them taken back here."""
        self.records.carriers.note(written)
        self.state.expiries.note(written)
        self._advance_threads(bot, written)
        gone = self.refused(bot, {u for r in written for u in whose_words(r)}, origin)
        kept = [r for r in written if r.user not in gone]
        self._undo(bot, [r for r in written if r.user in gone])
        if gone and unquote(self.records, bot, kept, gone):
            self.changed(bot)
        return kept

    def _undo(self, bot: str, records: list[Record]) -> None:
        """Take back records just written (their user was forgotten meanwhile): points, records, claims,
        and the thread tails that quote them."""
        if not records:
            return
        self._delete_records(records)
        drop_carriers(self.records.carriers, bot, records)  # noted by the write: a forget never saw them
        self.changed(bot)  # their words leave the files on disk too (the local purge)
        for r in records:
            threads = [
                t
                for t in (r.thread, fact_tail(r.server, r.project, r.user) if r.kind == "fact" else None)
                if t
            ]
            self.records.tails.drop(bot, threads, memory_id=int(r.id))

    def _index(self, bot: str, records: list[Record], defer: bool) -> None:
        """Points now (the usual write), or by an index job (bulk imports: the answer does not wait)."""
        if records and not defer:
            self.indexer.index_or_defer(bot, records)
        if not records or not defer:
            return
        ids = sorted(int(r.id) for r in records)
        try:
            for start in range(0, len(ids), 500):
                self.queue.send(IndexJob(bot=bot, ids=ids[start : start + 500]))
        except Exception:  # the records stay pending: the sweep queues them
            log.exception("could not queue index jobs for %d records", len(ids))

    def _fact_context(self, bot: str, tail: str, created: int) -> Context:
        """A fact's context: the fact its author saved just before in the same scope, if recent by the current
        model's settings (Retrieval.for_model), with whose it is and which record."""
        window_ms = self.indexer.retrieval.fact_context_minutes * 60_000
        if not window_ms:
            return None, None, None
        previous = self.records.tails.of(bot, [tail]).get(tail)
        if not previous or not previous.text or abs(created - previous.at) > window_ms:
            return None, None, None
        return previous.text[:MAX_CONTEXT_CHARS], previous.user, previous.id

    def _advance_threads(self, bot: str, written: list[Record]) -> None:
        newest: dict[str, Record] = {}
        for r in written:
            if (
                r.thread
                and r.text.strip()
                and r.expires_at is None  # words that expire are no one's context: they would outlive it
                and (r.thread not in newest or r.created_at >= newest[r.thread].created_at)
            ):
                newest[r.thread] = r
        for thread, r in newest.items():
            self.records.tails.advance(
                bot, thread, int(r.created_at), r.text[:MAX_CONTEXT_CHARS], r.user, int(r.id)
            )

    def _wait_for(self, bot: str, memory_id: int, timeout_s: float = 3.0) -> Memory:
        """A memory another request is writing right now: wait briefly for it to land."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.records.get(bot, memory_id)
            if record is not None:
                return Memory.from_record(record)
            if time.monotonic() > deadline:
                raise Unavailable("the same text is being saved by another request; try again")
            time.sleep(0.05)

    def update(self, bot: str, memory_id: int, text: str, by: str = "api") -> Memory:
        """Change a memory's text; if it now says what another memory says, the other one stands. The old
        text leaves every context that quoted it and is kept as a version (`by`: what changed it)."""
        text = clean_fact(text)
        record = self.records.get(bot, memory_id)
        if record is None:
            raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
        if record.kind == "message":  # its content holds its words too: they change with the text
            changed = self.edit_message(
                bot, memory_id, text, rewritten(record.content, record.text, text), by=by
            )
            if changed is None:
                raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
            return changed
        key = fact_key(record.server, record.project, record.user, text)  # a message went above: a fact
        if record.text == text:
            return Memory.from_record(record)
        holder = self.records.claims.find_unique(bot, key) if key != record.unique_key else None
        if holder is not None and int(holder.id) != memory_id:
            return self._merge_into(record, int(holder.id))
        record.versions = versions_after(record, by)
        try:
            self.records.change_text(record, text, key)
        except Duplicate as dup:
            return self._merge_into(record, dup.memory_id)
        self.release_words(bot, [record])
        self.indexer.index_or_defer(bot, [record])
        self.changed(bot)
        return Memory.from_record(record)

    def edit_message(
        self, bot: str, memory_id: int, text: str, content: dict[str, Any] | None, by: str = SOURCE_EDIT
    ) -> Memory | None:
        """A stored chat message edited at its source: its text and content follow, the old words leave
        every context that quoted them, and its point is made again. None when it is no longer stored. A
        version notes the change; its old words are kept only when engram's own API changed them (`by`):
        what the source withdrew is not kept."""
        record = self.records.get(bot, memory_id)
        if record is None or record.kind != "message":
            return None
        if record.text == text and (content is None or record.content == content):
            return Memory.from_record(record)
        record.versions = versions_after(record, by, withheld=by == SOURCE_EDIT)
        if not self.records.change_message(record, text, content):
            return None
        self.release_words(bot, [record])  # the old words leave the contexts and the tail that quote them
        self.indexer.index_or_defer(bot, [record])
        self.changed(bot)
        return Memory.from_record(record)

    def _merge_into(self, changed: Record, other_id: int) -> Memory:
        other = self._wait_for(changed.bot, other_id)
        self._delete_records([changed])
        self.release_words(changed.bot, [changed])
        self.changed(changed.bot)
        return other

    def remove(self, bot: str, memory_id: int) -> None:
        """Delete one memory from both stores, or NotFound; its text leaves every context that quoted it."""
        record = self.records.get(bot, memory_id)
        if record is None:
            raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
        self._remove_records(bot, [record])

    def remove_ids(self, bot: str, ids: list[int]) -> int:
        """Delete these memories (those still there) as `remove` deletes one; returns how many were."""
        return self._remove_records(bot, list(self.records.batch_get(bot, ids).values()) if ids else [])

    def remove_sources(self, bot: str, source_ids: list[str]) -> int:
        """Delete the chat messages stored under these source message ids (a deletion at the source)."""
        found = (
            self.records.claims.find_uniques(bot, [source_key(s) for s in source_ids]) if source_ids else {}
        )
        return self.remove_ids(bot, list(found.values()))

    def _remove_records(self, bot: str, records: list[Record]) -> int:
        """Records in hand leave both stores, and their words every context that quoted them."""
        if records:
            self._delete_records(records)
            self.release_words(bot, records)
            self.changed(bot)
        return len(records)

    def remove_thread(
        self, bot: str, thread: str, limit: int = 200, written_before: int | None = None
    ) -> int:
        """Delete up to `limit` of a thread's (or channel's) stored messages, oldest first: the source deleted
        it, or (`written_before`, ms) they aged out. Returns how many; 0 when none is left."""
        line = record_line(bot, "message", thread)
        return self.remove_ids(bot, self.records.line_first_ids(line, limit, written_before)) if line else 0

    def remove_server(self, bot: str, server: str, limit: int = 200) -> int:
        """Delete up to `limit` of a server's memories, newest first: the bot left it, or an operator asked.
        Returns how many; 0 when none is left."""
        records = self.records.newest(bot, "message", limit, Listing(server=server))
        if len(records) < limit:
            records += self.records.newest(bot, "fact", limit - len(records), Listing(server=server))
        return self._remove_records(bot, records)

    def remove_aged(self, bot: str, kind: str, cutoff: int, limit: int = 200) -> tuple[int, bool]:
        """Delete the oldest stored memories of a kind written before `cutoff` (ms), from its oldest page:
        (how many, whether to go on): on while that page was full and all received before the cutoff, so
        the work is what aged out, never the store's size."""
        page = self.records.page(bot, kind, Paging(None, limit, oldest_first=True))
        removed = self._remove_records(bot, [r for r in page if int(r.created_at) < cutoff])
        return removed, len(page) == limit and all(r.arrived < cutoff for r in page)

    def _delete_records(self, records: list[Record]) -> None:
        # Vectors first: if Qdrant is down nothing is deleted and the caller hears 503,
        # instead of a record gone with its vector still answering searches. The windows around them
        # lose their words before the records go: a call cut off after that is retried whole.
        self.index.delete([int(r.id) for r in records])
        self.indexer.rewindow(records, removed=True)
        self.records.delete(records)

    def release_words(self, bot: str, records: list[Record], author: str | None = None) -> int:
        """The words of these records (or, with `author`, every record of that author) leave the places that
        quote them: other records' contexts are cleared and their points made again, and thread tails that
        hold them are dropped. Returns how many contexts were cleared."""
        notes: dict[str | None, list[int]] = {}
        if author is not None:
            carrier_ids = self.records.carriers.of(bot, author)
            notes[author] = carrier_ids
        else:
            for r in records:
                notes.setdefault(r.user, []).extend(self.records.carriers.of(bot, r.user, source=int(r.id)))
            carrier_ids = [i for ids in notes.values() for i in ids]
        cleared = []
        for start in range(0, len(carrier_ids), 100):
            for carrier in self.records.batch_get(bot, carrier_ids[start : start + 100]).values():
                if (
                    carrier.context
                    and (author is None or carrier.context_author == author)
                    and self.records.clear_context(carrier)
                ):
                    cleared.append(carrier)
        for start in range(0, len(cleared), 100):
            self.indexer.index_or_defer(bot, cleared[start : start + 100])
        for who, ids in notes.items():
            self.records.carriers.drop(bot, who, ids)
        for r in records:
            threads = [
                t
                for t in (r.thread, fact_tail(r.server, r.project, r.user) if r.kind == "fact" else None)
                if t
            ]
            self.records.tails.drop(bot, threads, user=author, memory_id=int(r.id))
        return len(cleared)


def given_times(created_at: int | None, updated_at: int | None, stamp: int) -> tuple[int, int]:
    """A new memory's times: as given (updated defaults to created), else now."""
    created = created_at or stamp
    return created, updated_at or created


def unquote(records: RecordsPort, bot: str, kept: list[Record], gone: set[str]) -> bool:
    """Clear the contexts of records just written that quote a user forgotten meanwhile (their carrier
    items first, while the contexts still say whom they quote); whether any was."""
    quoting = [r for r in kept if quotes_any(r, gone)]
    drop_carriers(records.carriers, bot, quoting, whose=gone)
    for r in quoting:
        records.clear_context(r)
    return bool(quoting)


def drop_carriers(
    carriers: CarriersPort, bot: str, records: list[Record], whose: set[str] | None = None
) -> None:
    """The carrier items these records were noted under (only under these authors, given `whose`)."""
    ids: dict[str | None, list[int]] = {}
    for author, r in carrier_notes(records):
        if whose is None or author in whose:
            ids.setdefault(author, []).append(int(r.id))
    for author, carrier_ids in ids.items():
        carriers.drop(bot, author, carrier_ids)
