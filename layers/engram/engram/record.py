"""A memory record: one memory as every store holds it (a fact, or a stored chat message with its whole
content), what the memory rules read and hand back, and the names of the line and the scope it is listed
under. The stores map it to their rows (engram.store); nothing here knows a table."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .clock import now_ms

KINDS = ("fact", "message")


@dataclass(frozen=True, slots=True)
class Duplicate(Exception):
    """A unique key is already held by another memory."""

    memory_id: int


@dataclass(frozen=True, slots=True)
class Listing:
    """Which of a kind's records a listing reads, newest first: those of a server, a project and a user
    (None: any), with ids below `before` (the next page); `read_at_most` bounds what a listing no index
    serves may read, matching or not (the search fallback's bound)."""

    server: str | None = None
    project: str | None = None
    user: str | None = None
    before: int | None = None
    read_at_most: int | None = None


NO_NARROWING = Listing()


@dataclass(frozen=True, slots=True)
class Paging:
    """One page of a kind's records: up to `limit`, newest first below `cursor` (all when None), or with
    `oldest_first` above it; with `shard`, only those under that one of the kind's keys (a long pass reads
    them in parallel parts)."""

    cursor: int | None
    limit: int
    oldest_first: bool = False
    shard: int | None = None


def record_scope(bot: str, kind: str, server: str | None, project: str | None) -> str | None:
    """The byScope index key: a record's server, or its project when it has no server (None: neither).
    A record with both is listed under its server; a project's listing knows such records exist from
    `mixed_scopes` (see the DynamoDB store's newest)."""
    if server:
        return f"{bot}#{kind}#s:{server}"
    return f"{bot}#{kind}#p:{project}" if project else None


def record_line(
    bot: str,
    kind: str,
    thread: str | None,
    server: str | None = None,
    project: str | None = None,
    user: str | None = None,
) -> str | None:
    """The line a record's window is read along (byLine): its thread, or for a fact its author's facts in
    the same scope; None for a message outside any thread."""
    if kind == "fact":
        return f"{bot}#{fact_tail(server, project, user)}"
    return f"{bot}#{thread}" if thread else None


def fact_tail(server: str | None, project: str | None, user: str | None) -> str:
    """Where the newest fact of a scope is remembered ('#' never appears in a thread id)."""
    return f"fact#{server or ''}#{project or ''}#{user or ''}"


@dataclass(slots=True)
class MemoryFields:
    """What every memory has, stored (Record) or shown (domain.Memory): its bot and id, its kind and text,
    who saved it and when, and the scopes it belongs to."""

    bot: str
    id: int
    kind: str
    text: str
    saved_by: str
    created_at: int
    updated_at: int
    user: str | None = None
    server: str | None = None
    project: str | None = None
    content: Any = None
    source_id: str | None = None
    # the caller's own labels (flat: string, number or boolean values), filtered on by list and search
    metadata: dict[str, Any] | None = None
    # when it stops being a memory (ms): past it no read shows it and the sweep deletes it
    expires_at: int | None = None

    def expired(self, now: int) -> bool:
        """Whether its time ran out by `now` (ms)."""
        return self.expires_at is not None and int(self.expires_at) <= now


def field_names(cls: type) -> tuple[str, ...]:
    """A memory dataclass's field names, its bases' included (slots name only a class's own)."""
    return tuple(f.name for f in fields(cls))


@dataclass(slots=True)
class Record(MemoryFields):
    """One memory as the store holds it: a fact, or a stored chat message with its whole content. A plain
    object: what the rest of engram reads and hands back; only this package knows the table's rows."""

    unique_key: str | None = None
    thread: str | None = None
    context: str | None = None
    # whose words the context is, and from which record: what a forget, delete or change clears
    context_author: str | None = None
    context_source: int | None = None
    # the model of the dense vector its point was written with (re-embedding asks the index, not this)
    vector_model: str | None = None
    # when engram received it (ms): what a forget is compared with, never a time the caller gave
    received_at: int | None = None
    pending: bool = True  # its point (or its dense vector) is still to be written
    # the line its row holds: None for a record stored before windows (a reconcile gives it its line)
    stored_line: str | None = None
    # the byScope key its row holds: None for a record stored before byScope (the stamp pass gives it)
    stored_scope: str | None = None
    # what it said before each change, oldest first: {"text" (left out when the source withdrew it),
    # "at" (ms, when that text was written), "by" (what changed it)}; it goes with the record
    versions: list[dict[str, Any]] | None = None

    @property
    def scope(self) -> str | None:
        """The key it is listed under in its server (or project): byScope."""
        return record_scope(self.bot, self.kind, self.server, self.project)

    @property
    def arrived(self) -> int:
        """When engram received it; records written before `received_at` existed fall back to created_at."""
        return self.received_at if self.received_at is not None else int(self.created_at)

    @property
    def line(self) -> str | None:
        """The line its window is read along: its thread, or a fact's author and scope (byLine)."""
        return record_line(self.bot, self.kind, self.thread, self.server, self.project, self.user)

    def drop_context(self) -> None:
        """The context is cleared (in the store too: see its clear_context)."""
        self.context = self.context_author = None
        self.context_source = None


# A memory's versions: the newest ten, within 32 KB of old text (a DynamoDB item holds 400 KB)
MAX_VERSIONS, MAX_VERSION_BYTES = 10, 32_768
SOURCE_EDIT = "source"  # a chat message edited where it was written (Discord): its old words are withdrawn


def versions_after(record: Record, by: str, withheld: bool = False) -> list[dict[str, Any]]:
    """A record's versions with its current text added as the newest (`withheld`: only that it changed)."""
    version: dict[str, Any] = {"at": int(record.updated_at), "by": by}
    if not withheld:
        version["text"] = record.text
    kept = [*(record.versions or []), version][-MAX_VERSIONS:]
    while len(kept) > 1 and sum(len(str(v.get("text", "")).encode()) for v in kept) > MAX_VERSION_BYTES:
        kept.pop(0)
    return kept


def drew_on(record: MemoryFields) -> list[str]:
    """Whose words an /ask answer was made from (its content's drewOn), if it is one (a stored record or
    a memory as a door shows it)."""
    users = record.content.get("drewOn") if isinstance(record.content, dict) else None
    return [str(u) for u in users if u] if isinstance(users, list) else []


def reply_author(record: Record) -> str | None:
    """Whom a stored chat message replies to (its content's replyTo.authorId), if anyone."""
    reply = record.content.get("replyTo") if isinstance(record.content, dict) else None
    author = reply.get("authorId") if isinstance(reply, dict) else None
    return str(author) if author else None


def whose_words(record: Record) -> list[str | None]:
    """Whose words a record holds: its author's, and its context's author's."""
    return [record.user, record.context_author] if record.context else [record.user]


def quotes_any(record: Record, users: set[str]) -> bool:
    """Whether its context quotes one of these users."""
    return bool(record.context) and record.context_author in users


def carrier_notes(records: list[Record]) -> list[tuple[str | None, Record]]:
    """Whose words each of these records carries, as (author, record): a context quoting someone else, a
    reply to someone else, an /ask answer drawn on others' words. What the carriers index holds, so a
    forget, a delete or a change reaches every record that carries someone's words."""
    notes = [(r.context_author, r) for r in records if _quotes(r)]
    notes += [(reply_author(r), r) for r in records if _answers_another(r)]
    # an /ask answer names whose words the model was given: a forget of any of them removes it
    noted = {(author, int(r.id)) for author, r in notes}
    notes += [(a, r) for r in records for a in drew_on(r) if a != r.user and (a, int(r.id)) not in noted]
    return notes


def _quotes(record: Record) -> bool:
    """Its context quotes someone (an imported context knows its author, not always its source record)."""
    return bool(record.context) and (record.context_source is not None or bool(record.context_author))


def _answers_another(record: Record) -> bool:
    """It replies to someone else (content.replyTo.authorId) whom its context does not name already."""
    author = reply_author(record)
    return author not in (None, record.user) and not (record.context and author == record.context_author)


def new_record(
    bot: str,
    memory_id: int,
    kind: str,
    text: str,
    *,
    user: str | None = None,
    saved_by: str = "owner",
    created_at: int,
    updated_at: int,
    **fields: Any,
) -> Record:
    """A record not yet written (marked pending: its point comes next)."""
    return Record(
        bot=bot,
        id=memory_id,
        kind=kind,
        text=text,
        user=user,
        saved_by=saved_by,
        created_at=created_at,
        updated_at=updated_at,
        received_at=now_ms(),
        **fields,
    )
