"""Memories people can take with them: a bot's records (or one user's) as NDJSON, streamed a page at a
time, and the same NDJSON imported — idempotent (facts fold into the memory already there, messages
dedupe by source id), checked line by line (a bad line is reported by number and nothing of it is
stored), its vectors made by index jobs afterwards.

A bot's export opens with its forgets (`{"kind": "forgotten", "userId", "forgottenAt"}`: ids and times,
no words), and an import applies a file's forgets before anything else: moving an installation moves its
forgets, so neither that file nor any older one brings a forgotten user back. An import stores each line
as received when the import arrived: a forget that lands while it runs wins."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from .clock import now_ms
from .domain import Terms, check_name, required_name
from .errors import EngramError, Forgotten, InvalidInput
from .record import MAX_VERSIONS, Paging
from .service import ChatMessage, MemoryService
from .shapes import export_line
from .store import KINDS

PAGE = 200
BATCH = 200  # messages stored per add_messages call while importing
Bad = dict[str, Any]  # a line that was not stored: {"line": its number, "error": why}


def export_lines(service: MemoryService, bot: str, user: str | None = None) -> Iterator[str]:
    """NDJSON of every record of the bot (or of one user), oldest first per kind, a page at a time."""
    bot, user = required_name("bot", bot), check_name("userId", user)
    records = service.records
    hidden = service.reads.hider(bot)  # a forget under way: its user's words are not exported meanwhile
    if user is not None:
        yield from _user_lines(service, bot, user)
        return
    yield from _forget_lines(service, bot)  # the forgets first: an import applies them before the lines
    for kind in KINDS:
        after = None
        while page := records.page(bot, kind, Paging(after, PAGE, oldest_first=True)):
            for r in page:
                if hidden.record(r):
                    continue
                yield json.dumps(export_line(r), ensure_ascii=False) + "\n"
            after = int(page[-1].id)


def _user_lines(service: MemoryService, bot: str, user: str) -> Iterator[str]:
    records, hidden = service.records, service.reads.hider(bot)
    after = None
    while ids := records.user_ids_oldest_first(bot, user, after, PAGE):
        found = records.batch_get(bot, ids)
        for i in ids:
            if i in found and not hidden.record(found[i]):
                yield json.dumps(export_line(found[i]), ensure_ascii=False) + "\n"
        after = ids[-1]


def _forget_lines(service: MemoryService, bot: str) -> Iterator[str]:
    after = None
    while page := service.state.tombstones.page(bot, after, PAGE):
        for user, at in page:
            line = {"kind": "forgotten", "userId": user, "forgottenAt": _iso(at)}
            yield json.dumps(line, ensure_ascii=False) + "\n"
        after = page[-1][0]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ForgetLine(BaseModel):
    """A forget an export carries: whom, and when (no words)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["forgotten"]
    userId: str = Field(min_length=1)
    forgottenAt: AwareDatetime


class HistoryLine(BaseModel):
    """One earlier text of a memory, as an export carries it."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = Field(None, max_length=16_000)
    at: AwareDatetime
    by: str = Field(min_length=1, max_length=40)


def _versions(line: ImportLine) -> list[dict[str, Any]] | None:
    """A line's history as a record keeps it (times in ms; a withdrawn text stays left out)."""
    if not line.history:
        return None
    return [
        {"at": _ms(v.at), "by": v.by, **({"text": v.text} if v.text is not None else {})}
        for v in line.history
    ]


class ImportLine(BaseModel):
    """One line of an export."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["fact", "message"]
    id: str | None = Field(None, max_length=40, description="The id in the bot it came from (not kept)")
    text: str = Field("", max_length=16_000)
    savedBy: Literal["bot", "owner", "user"] = "user"
    createdAt: AwareDatetime | None = None
    updatedAt: AwareDatetime | None = None
    userId: str | None = None
    serverId: str | None = None
    project: str | None = None
    sourceMessageId: str | None = None
    threadId: str | None = None
    context: str | None = None
    contextUserId: str | None = None
    content: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    expiresAt: AwareDatetime | None = None
    history: list[HistoryLine] | None = Field(None, max_length=MAX_VERSIONS)


def _ms(value: datetime | None) -> int | None:
    return int(value.astimezone(UTC).timestamp() * 1000) if value else None


def _error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    if isinstance(exc, EngramError):
        return exc.message
    return str(exc)


def _written(line: ImportLine) -> dict[str, Any]:
    """Who wrote a line, where and when, as a fact or a message is stored with it."""
    return {
        "user": line.userId,
        "server": line.serverId,
        "project": line.project,
        "saved_by": line.savedBy,
        "created_at": _ms(line.createdAt),
        "updated_at": _ms(line.updatedAt),
    }


def _apply_forgets(service: MemoryService, bot: str, forgets: list[tuple[int, Any]]) -> tuple[list[Bad], int]:
    """The file's forgets, applied before its lines: each user's tombstone kept (the later of the two
    times), and what the bot holds of them already forgotten. Returns the bad ones and the count."""
    errors: list[Bad] = []
    applied = 0
    for number, value in forgets:
        try:
            line = ForgetLine.model_validate(value)
            user = required_name("userId", line.userId)
        except (ValidationError, InvalidInput) as exc:
            errors.append({"line": number, "error": _error(exc)})
            continue
        at = _ms(line.forgottenAt) or 0
        known = service.state.tombstones.when(bot, [user]).get(user, 0)
        if service.records.count_user(bot, user):
            service.forget_user(bot, user)  # a fresh forget here: everything of theirs this bot holds
        if at > known:
            service.state.tombstones.mark(bot, user, at)
        applied += 1
    return errors, applied


def _read(lines: Iterable[str]) -> tuple[list[tuple[int, Any]], list[tuple[int, Any]], list[Bad]]:
    """An export's lines read once, by number: its forgets, its records, and the lines that are not JSON
    (blank lines skipped)."""
    forgets: list[tuple[int, Any]] = []
    records: list[tuple[int, Any]] = []
    errors: list[Bad] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as exc:
            errors.append({"line": number, "error": f"Invalid JSON: {exc}"})
            continue
        forget = isinstance(value, dict) and value.get("kind") == "forgotten"
        (forgets if forget else records).append((number, value))
    return forgets, records, errors


def import_lines(service: MemoryService, bot: str, lines: Iterable[str]) -> dict[str, Any]:
    """Store an export's lines into `bot`; returns counts and every bad line's number and reason."""
    bot = required_name("bot", bot)
    arrived = now_ms()  # every line is received now: a forget after this refuses it, however batched
    forget_lines, record_lines, errors = _read(lines)
    forget_errors, forgets = _apply_forgets(service, bot, forget_lines)
    errors += forget_errors
    counts: dict[str, Any] = {
        "facts": {"created": 0, "existing": 0},
        "messages": {"created": 0, "existing": 0},
        "forgotten": forgets,
    }
    pending: list[ChatMessage] = []
    seen: set[str] = set()

    def flush() -> None:
        if pending:
            created = service.add_messages(bot, pending, defer_vectors=True, origin=arrived).created
            counts["messages"]["created"] += created
            counts["messages"]["existing"] += len(pending) - created
            pending.clear()
            seen.clear()

    for number, value in record_lines:
        try:
            line = ImportLine.model_validate(value)
            for field, value in (
                ("userId", line.userId),
                ("serverId", line.serverId),
                ("project", line.project),
                ("threadId", line.threadId),
                ("contextUserId", line.contextUserId),
            ):
                check_name(field, value)
            _without_the_forgotten(service, bot, line)
            terms = Terms(line.metadata, _ms(line.expiresAt)).checked(arrived)  # an expired line: refused
            if line.kind == "fact":
                _, created = service.add_fact(
                    bot,
                    line.text,
                    **_written(line),
                    defer_vectors=True,
                    origin=arrived,
                    terms=terms,
                    versions=_versions(line),
                )
                counts["facts"]["created" if created else "existing"] += 1
                continue
            if not line.sourceMessageId:
                raise ValueError("a message needs its sourceMessageId")
            message = ChatMessage(
                source_id=line.sourceMessageId,
                text=line.text,
                **_written(line),
                content=line.content,
                thread=line.threadId,
                # a context whose author the line does not name is left out: no forget could find it
                context=line.context if line.contextUserId else None,
                context_author=line.contextUserId if line.context else None,
                metadata=terms.metadata,
                expires_at=terms.expires_at,
                versions=_versions(line),
            )
            if message.source_id in seen:  # twice in one batch: the first stands
                counts["messages"]["existing"] += 1
                continue
        except (
            ValidationError,
            InvalidInput,
            ValueError,
            Forgotten,
        ) as exc:  # Unavailable: the caller hears 503
            errors.append({"line": number, "error": _error(exc)})
            continue
        seen.add(message.source_id)
        pending.append(message)
        if len(pending) >= BATCH:
            flush()
    flush()
    return {**counts, "errors": sorted(errors, key=lambda e: int(e["line"]))}


def _quoted_people(line: ImportLine) -> tuple[set[str], str]:
    """Whose words a line's content carries besides its own author: those an /ask answer drew on, and the
    author of the message it replies to ('' when none)."""
    content: dict[str, Any] = line.content if isinstance(line.content, dict) else {}
    listed, replied = content.get("drewOn"), content.get("replyTo")
    drew = {str(u) for u in listed if u} if isinstance(listed, list) else set()
    return drew, str(replied.get("authorId") or "") if isinstance(replied, dict) else ""


def _without_the_forgotten(service: MemoryService, bot: str, line: ImportLine) -> None:
    """An export must not bring the forgotten back. When a line was written is only what the export says (a
    line dated in the future would pass any date check), so a forgotten user's lines are refused whatever
    their date, and so is an answer made from their words (its drewOn names them); a context quoting them
    is left out, and a reply to them keeps no trace of whom it replied to."""
    drew, reply_author = _quoted_people(line)
    named = {line.userId or "", line.contextUserId or "", reply_author, *drew} - {""}
    gone = service.state.tombstones.when(bot, named)
    if line.userId in gone:
        raise Forgotten(f"its user {line.userId!r} was forgotten; an import does not bring them back")
    if gone.keys() & drew:
        raise Forgotten(
            "it is an answer made from a forgotten user's words; an import does not bring them back"
        )
    if line.contextUserId in gone:
        line.context, line.contextUserId = None, None
    if reply_author in gone and isinstance(line.content, dict):
        line.content = {k: v for k, v in line.content.items() if k != "replyTo"}
