"""Memories: list, search, add, change, remove; chat messages in batches; forget a user."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from ...domain import Found, Terms, check_limit, metadata_filter
from ...errors import InvalidInput
from ...portability import export_lines, import_lines
from ...service import ChatMessage, MemoryService
from ...shapes import iso
from ...text import MEMORY_ID_PATTERN, NAME_PATTERN, format_memory_id, parse_memory_id
from ..deps import ERRORS, MESSAGES_BODY, SMALL_BODY, Admin, Bot, Reader
from ..schemas import (
    BotList,
    ErrorResponse,
    ForgetResult,
    History,
    ImportResult,
    MemoryChange,
    MemoryList,
    MemoryOut,
    MessageBatch,
    MessageBatchResult,
    NewMemory,
    ServerRemoved,
)

router = APIRouter(tags=["memories"], responses=ERRORS)
MemoryId = Annotated[str, Path(examples=["mem:12"], pattern=MEMORY_ID_PATTERN)]
Name = Annotated[str | None, Query(pattern=NAME_PATTERN)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "No such memory in this bot"}
}


@router.get("/v1/bots/{bot}/memories", response_model=MemoryList, response_model_exclude_unset=True)
def list_memories(  # noqa: PLR0913 - FastAPI's query parameters; to become one query model
    bot: Bot,
    access: Reader,
    request: Request,
    response: Response,
    query: Annotated[
        str | None, Query(description="Search by words and meaning, best first.", max_length=2000)
    ] = None,
    limit: Annotated[int | None, Query(ge=1, le=500, description="1-500; 200 when not given.")] = None,
    minScore: Annotated[
        float | None,
        Query(
            ge=0,
            le=1,
            description="With `query`: only memories at least this relevant (0-1; a memory's `score`: "
            "0.5 is as close as a question and an answer that share no word; see docs/memory-api.md).",
        ),
    ] = None,
    kind: Annotated[Literal["fact", "message"], Query()] = "fact",
    userId: Name = None,
    serverId: Name = None,
    project: Name = None,
    askedBy: Annotated[
        str | None,
        Query(
            pattern=NAME_PATTERN,
            description='With `query`: the user asking; a question about themselves ("I", "my") '
            "favours their memories, as the proxy and `/ask` do for the user who asks.",
        ),
    ] = None,
    before: Annotated[
        str | None,
        Query(
            pattern=MEMORY_ID_PATTERN,
            examples=["mem:12"],
            description="Page on: only memories older than this one (the last id of a page).",
        ),
    ] = None,
) -> dict[str, Any]:
    """List a bot's memories newest first (page on with `before`), or search them when `query` is given.
    `metadata.<key>=<value>` (repeatable: all must hold) keeps only memories with those values. The proxy
    key may read its own bot's memories here."""
    access.check(bot)
    eng = access.engine
    metadata = metadata_filter({k: v for k, v in request.query_params.items() if k.startswith("metadata.")})
    if query is not None and query.strip():
        found = eng.service.search(
            bot,
            query,
            kind,
            limit,
            user=userId,
            server=serverId,
            project=project,
            metadata=metadata,
            min_score=minScore,
            asker=askedBy,
        )
        response.headers["x-engram-search"] = "words+meaning" if found.meaning else "words"
        return {"memories": [m.to_json() for m in found], "meaning": found.meaning}
    newest = eng.service.list(
        bot,
        kind,
        limit,
        user=userId,
        server=serverId,
        project=project,
        before=parse_memory_id(before) if before else None,
        metadata=metadata,
    )
    page: dict[str, Any] = {"memories": [m.to_json() for m in newest]}
    following = next_page(newest, limit)
    if following is not None:
        page["next"] = following
        url = request.url.include_query_params(before=following)
        response.headers["link"] = f'<{url.path}?{url.query}>; rel="next"'
    return page


def next_page(newest: Found, limit: int | None) -> str | None:
    """Where the next page starts: after a full page (more may follow), or where a page a metadata filter
    stopped reading early got to."""
    if newest.read_to is not None:
        return format_memory_id(newest.read_to)
    if newest and len(newest) >= check_limit(limit):
        return format_memory_id(newest[-1].id)
    return None


@router.get("/v1/bots", response_model=BotList)
def list_bots(access: Reader) -> dict[str, Any]:
    """Every bot that has memories (for the proxy key: its own bot)."""
    bots = access.engine.service.bots()
    return {"bots": bots if access.bots is None else sorted(access.bots)}


@router.post(
    "/v1/bots/{bot}/memories",
    response_model=MemoryOut,
    response_model_exclude_unset=True,
    status_code=201,
    responses={
        200: {"model": MemoryOut, "description": "The same text was already remembered (or superseded)"},
        **NOT_FOUND,
    },
    max_body_size=SMALL_BODY,
)
def add_memory(bot: Bot, body: NewMemory, eng: Admin, response: Response) -> dict[str, Any]:
    """Add a fact; the same text in other case or spacing answers 200 with the memory already there (its
    metadata and expiry unchanged). With `supersedes`, the memory named takes the text instead (its old
    text kept in its history) and is answered with 200."""
    if body.supersedes is not None:
        response.status_code = 200
        return _supersede(eng.service, bot, parse_memory_id(body.supersedes), body)
    memory, created = eng.service.add_fact(
        bot,
        body.text,
        user=body.userId,
        server=body.serverId,
        project=body.project,
        saved_by="owner",
        terms=Terms(body.metadata, epoch_ms(body.expiresAt)),
    )
    response.status_code = 201 if created else 200
    return memory.to_json()


@router.post("/v1/bots/{bot}/messages", response_model=MessageBatchResult, max_body_size=MESSAGES_BODY)
def add_messages(bot: Bot, body: MessageBatch, eng: Admin) -> dict[str, Any]:
    """Store chat messages (kind `message`) in one batch; a message id already stored is not stored again."""
    messages = [
        ChatMessage(
            source_id=m.id,
            text=m.text,
            user=m.userId,
            server=m.serverId,
            project=m.project,
            created_at=m.created_ms(),
            content=m.content,
            saved_by=m.savedBy,
            thread=m.threadId,
        )
        for m in body.messages
    ]
    added = eng.service.add_messages(bot, messages)
    memories, created = added.memories, added.created
    return {"created": created, "ids": [format_memory_id(m.id) for m in memories]}


@router.get(
    "/v1/bots/{bot}/memories/{memory_id}",
    response_model=MemoryOut,
    response_model_exclude_unset=True,
    responses=NOT_FOUND,
)
def get_memory(bot: Bot, memory_id: MemoryId, access: Reader) -> dict[str, Any]:
    """One memory by id (`12` or `mem:12`)."""
    access.check(bot)
    return access.engine.service.get(bot, parse_memory_id(memory_id)).to_json()


@router.get("/v1/bots/{bot}/memories/{memory_id}/history", response_model=History, responses=NOT_FOUND)
def memory_history(bot: Bot, memory_id: MemoryId, access: Reader) -> dict[str, Any]:
    """What a memory said before each change, newest first; a forget or delete takes it with the memory."""
    access.check(bot)
    versions = access.engine.service.history(bot, parse_memory_id(memory_id))
    return {"history": [{"text": v.text, "at": iso(v.at), "by": v.by} for v in versions]}


@router.delete("/v1/bots/{bot}/memories/{memory_id}/history", status_code=204, responses=NOT_FOUND)
def clear_memory_history(bot: Bot, memory_id: MemoryId, eng: Admin) -> Response:
    """Forget what a memory said before its changes (its history), keeping the memory as it is now."""
    eng.service.clear_history(bot, parse_memory_id(memory_id))
    return Response(status_code=204)


@router.patch(
    "/v1/bots/{bot}/memories/{memory_id}",
    response_model=MemoryOut,
    response_model_exclude_unset=True,
    responses=NOT_FOUND,
    max_body_size=SMALL_BODY,
)
def change_memory(bot: Bot, memory_id: MemoryId, body: MemoryChange, eng: Admin) -> dict[str, Any]:
    """Change a memory's text, metadata or expiry; if its text now says what another says, that other memory
    stands and comes back."""
    service, memory = eng.service, parse_memory_id(memory_id)
    given = body.model_fields_set
    if "metadata" in given or "expiresAt" in given:
        held = service.get(bot, memory)
        terms = Terms(
            body.metadata if "metadata" in given else held.metadata,
            epoch_ms(body.expiresAt) if "expiresAt" in given else held.expires_at,
        )
        changed = service.relabel(bot, memory, terms)
    if body.text is not None:
        return service.update(bot, memory, body.text).to_json()
    if "metadata" in given or "expiresAt" in given:
        return changed.to_json()
    raise InvalidInput("nothing to change: give text, metadata or expiresAt")


def _supersede(service: MemoryService, bot: str, memory_id: int, body: NewMemory) -> dict[str, Any]:
    """A new fact that replaces one: the old memory rewritten (and relabelled when terms are given)."""
    held = service.get(bot, memory_id)
    if held.kind != "fact" or (body.userId is not None and held.user != body.userId):
        raise InvalidInput("supersedes must name a fact of the same user")
    if body.metadata is not None or body.expiresAt is not None:
        service.relabel(bot, memory_id, Terms(body.metadata, epoch_ms(body.expiresAt)))
    return service.update(bot, memory_id, body.text).to_json()


def epoch_ms(when: datetime | None) -> int | None:
    """A time the API was given, as epoch milliseconds."""
    return int(when.timestamp() * 1000) if when is not None else None


@router.delete("/v1/bots/{bot}/memories/{memory_id}", status_code=204, responses=NOT_FOUND)
def remove_memory(bot: Bot, memory_id: MemoryId, eng: Admin) -> Response:
    """Remove one memory from both stores."""
    eng.service.remove(bot, parse_memory_id(memory_id))
    return Response(status_code=204)


@router.delete(
    "/v1/bots/{bot}/users/{user_id}/memories",
    response_model=ForgetResult,
    responses={
        202: {
            "model": ForgetResult,
            "description": "Under way (a large user): `done` false, `left` records still to delete by jobs; "
            "every read hides the user meanwhile",
        }
    },
)
def forget_user(
    bot: Bot, user_id: Annotated[str, Path(pattern=NAME_PATTERN)], eng: Admin, response: Response
) -> dict[str, Any]:
    """Forget a user everywhere (the same call as Discord's /memory forget): their records and vectors, the
    contexts of others' records that quote them, consent, backfill state, tokens, settings; and a tombstone,
    so nothing queued before the forget can store anything of theirs after it. A large user is answered at
    once with 202, `done: false` and how many records are `left`: jobs finish the forget, and every read
    hides the user until they have."""
    deleted = eng.service.forget_user(bot, user_id)
    if not deleted["done"]:
        response.status_code = 202
    return {"deleted": deleted}


SERVER_DELETE_BUDGET_S = 20.0


@router.delete("/v1/bots/{bot}/servers/{server_id}/memories", response_model=ServerRemoved)
def remove_server(
    bot: Bot, server_id: Annotated[str, Path(pattern=NAME_PATTERN)], eng: Admin
) -> dict[str, Any]:
    """Delete every memory of one server (a Discord server the bot left, or any server scope), as single
    deletes do: records, vectors, the contexts that quoted them. A large server takes more than one call:
    `done` false says to call again."""
    deadline = time.monotonic() + SERVER_DELETE_BUDGET_S
    deleted, step = 0, 200
    while time.monotonic() < deadline:
        removed = eng.service.remove_server(bot, server_id, step)
        deleted += removed
        if removed < step:
            return {"deleted": deleted, "done": True}
    return {"deleted": deleted, "done": False}


NDJSON = "application/x-ndjson"


@router.get(
    "/v1/bots/{bot}/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {NDJSON: {"schema": {"type": "string"}}},
            "description": "One JSON object per line: every record with all its fields",
        }
    },
)
def export_memories(bot: Bot, access: Reader, userId: Name = None) -> StreamingResponse:
    """Every record of the bot (or of one user) as NDJSON, oldest first per kind, streamed a page at a
    time. On AWS use the streaming URL for big bots (API Gateway and Lambda buffer up to 6 MB)."""
    access.check(bot)
    lines = export_lines(access.engine.service, bot, userId)
    first = next(lines, None)  # bad names and an unreachable DynamoDB answer as errors, not a cut stream

    def stream() -> Iterator[str]:
        if first is not None:
            yield first
            yield from lines

    filename = f"{bot}-{userId}.ndjson" if userId else f"{bot}.ndjson"
    return StreamingResponse(
        iterate_in_threadpool(stream()),
        media_type=NDJSON,
        headers={"content-disposition": f'attachment; filename="{filename}"'},
    )


@router.post(
    "/v1/bots/{bot}/import",
    response_model=ImportResult,
    max_body_size=MESSAGES_BODY,
    openapi_extra={"requestBody": {"required": True, "content": {NDJSON: {"schema": {"type": "string"}}}}},
)
async def import_memories(bot: Bot, request: Request, eng: Admin) -> dict[str, Any]:
    """Store an export (NDJSON) into this bot: its forgets first (`{"kind": "forgotten", ...}` lines: their
    users' lines, here or in any later import, are refused), then facts fold into the memory already there,
    messages already stored by source id are skipped; a bad line is reported by number and nothing of it
    is stored. Every line counts as received when the import arrived: a forget that lands while it runs
    wins. Vectors are made by jobs after the answer."""
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput("the body must be UTF-8 NDJSON (one JSON object per line)") from exc
    return await run_in_threadpool(import_lines, eng.service, bot, text.splitlines())
