"""The Memory API: list, search, add, change, remove and forget memories over HTTP."""


import hmac
import logging
import os
from typing import Annotated, Any, Callable, Literal

from fastapi import Depends, FastAPI, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine import Engine, get_engine
from ..errors import EngramError, InvalidInput, Unauthorized
from ..service import ChatMessage
from ..text import format_memory_id, parse_memory_id

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """What went wrong."""

    code: str
    message: str


class ErrorResponse(BaseModel):
    """Every error answer."""

    error: ErrorBody


class MemoryOut(BaseModel):
    """A memory in JSON."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(examples=["mem:12"])
    text: str
    kind: Literal["fact", "message"]
    savedBy: Literal["bot", "owner", "user"]
    createdAt: str
    updatedAt: str
    userId: str | None = None
    serverId: str | None = None
    project: str | None = None
    sourceMessageId: str | None = None
    content: Any | None = None
    score: float | None = Field(default=None, description="Present on search results: higher is better.")


class MemoryList(BaseModel):
    """Newest first, or best first when a query was given."""

    memories: list[MemoryOut]


class NewMemory(BaseModel):
    """A fact to remember (1-1,000 characters after trimming)."""

    text: str
    userId: str | None = None
    serverId: str | None = None
    project: str | None = None


class MemoryChange(BaseModel):
    """The new text of a memory."""

    text: str


class MessageIn(BaseModel):
    """A chat message to store; `id` is its source message id, unique per bot."""

    id: str = Field(min_length=1, max_length=128)
    text: str = ""
    userId: str | None = None
    serverId: str | None = None
    project: str | None = None
    createdAt: AwareDatetime | None = None
    content: dict[str, Any] | None = None
    savedBy: Literal["bot", "owner", "user"] = "user"
    threadId: str | None = Field(default=None, description="The conversation (channel, chat) it belongs to.")


class MessageBatch(BaseModel):
    """Up to 500 messages, stored idempotently."""

    messages: list[MessageIn] = Field(min_length=1, max_length=500)


class MessageBatchResult(BaseModel):
    """How many were new, and every message's memory id in input order."""

    created: int
    ids: list[str]


class ForgetResult(BaseModel):
    """What a forget deleted."""

    deleted: dict[str, int]


class EmbeddingSettingsOut(BaseModel):
    """Where vectors come from: `local`, `remote` (a provider and model) or `off` (words only)."""

    embedder: Literal["local", "remote", "off"]
    embeddingProvider: str | None = None
    embeddingModel: str | None = None
    messageVectors: int


class EmbeddingProgress(BaseModel):
    """How far the current model's vectors have got."""

    model: str | None
    memories: int
    memoriesWithVectors: int
    messages: int
    withVectors: int
    error: str | None = None


class Health(BaseModel):
    """Liveness and what the engine runs on."""

    model_config = ConfigDict(extra="allow")
    ok: bool


ERRORS = {
    400: {"model": ErrorResponse, "description": "Bad input"},
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer key"},
    503: {"model": ErrorResponse, "description": "A dependency is down; nothing was changed"},
}


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _describe(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body",)) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class LazyASGI:
    """An ASGI app built on its first request: the MCP SDK's import alone costs ~0.3 s of every cold
    start, and most invocations never touch /mcp."""

    def __init__(self, build: Callable[[], Any]):
        self._build = build
        self._app = None

    async def __call__(self, scope, receive, send):
        if self._app is None:
            self._app = self._build()
        await self._app(scope, receive, send)


def api_docs_enabled() -> bool:
    """API docs (/docs, /redoc, /openapi.json): on locally, off on Lambda unless ENGRAM_API_DOCS=true."""
    setting = os.environ.get("ENGRAM_API_DOCS", "").strip().lower()
    if setting:
        return setting in ("1", "true", "yes", "on")
    return not os.environ.get("AWS_LAMBDA_FUNCTION_NAME")


def create_app(engine_factory: Callable[[], Engine] = get_engine, proxy_factory: Callable | None = None,
               discord_settings_factory: Callable | None = None) -> FastAPI:
    """The Memory API app, with the LibreChat proxy and MCP endpoint mounted when `proxy_factory` is
    given; both are looked up per request so tests and the local stack can wire them."""
    docs = api_docs_enabled()
    app = FastAPI(
        title="engram Memory API",
        version="1.0.0",
        description="Long-term memory for chat bots: list, search, add, change, remove and forget memories.",
        openapi_url="/openapi.json" if docs else None,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )

    def engine() -> Engine:
        eng = engine_factory()
        eng.refresh()
        return eng

    def require_key(
        authorization: Annotated[str | None, Header(description="Bearer <ENGRAM_API_KEY>")] = None,
        eng: Engine = Depends(engine),
    ) -> Engine:
        expected = eng.api_key()
        scheme, _, presented = (authorization or "").partition(" ")
        if not expected or scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), expected.encode()):
            raise Unauthorized("missing or wrong bearer key")
        return eng

    Authed = Annotated[Engine, Depends(require_key)]
    Bot = Annotated[str, Path(description="The bot whose memories these are.", max_length=128)]

    @app.exception_handler(EngramError)
    async def engram_error(_: Request, exc: EngramError):
        if exc.status >= 500:
            log.warning("%s: %s", exc.code, exc.message)
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError):
        return _error(400, "invalid", _describe(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.get("/livez", response_model=Health, tags=["ops"])
    def livez() -> dict:
        """The process is up: touches no dependency (the Lambda Web Adapter's readiness check)."""
        return {"ok": True}

    @app.get("/healthz", response_model=Health, tags=["ops"])
    def healthz(eng: Engine = Depends(engine)) -> dict:
        """Liveness and dependency state: answers without a key."""
        service = eng.service
        out = {"ok": True, "embedder": service.dense_name, "lastError": service.last_error}
        if proxy_factory is not None:
            proxy = proxy_factory()
            out["upstreams"] = [u.name for u in proxy.settings.upstreams]
            out["cache"] = {
                "recall": proxy.memory.recall_cache.stats(),
                "settings": proxy.memory.settings_cache.stats(),
                "project": proxy.projects.cache.stats(),
            }
            out["mongo"] = {
                "configured": proxy.projects.db is not None,
                "lookups": proxy.projects.lookups,
                "errors": proxy.projects.errors,
                "lastError": proxy.projects.last_error,
            }
            out["calls"] = proxy.counters.as_json()
        return out

    @app.get("/v1/bots/{bot}/memories", response_model=MemoryList, response_model_exclude_unset=True, responses=ERRORS, tags=["memories"])
    def list_memories(
        bot: Bot,
        eng: Authed,
        query: Annotated[str | None, Query(description="Search by words and meaning, best first.")] = None,
        limit: Annotated[int | None, Query(ge=1, le=500, description="1-500; 200 when not given.")] = None,
        kind: Annotated[Literal["fact", "message"], Query()] = "fact",
        userId: str | None = None,
        serverId: str | None = None,
        project: str | None = None,
    ) -> dict:
        """List a bot's memories newest first, or search them when `query` is given."""
        scope = {"user": userId, "server": serverId, "project": project}
        if query is not None and query.strip():
            found = eng.service.search(bot, query, kind, limit, **scope)
        else:
            found = eng.service.list(bot, kind, limit, **scope)
        return {"memories": [m.to_json() for m in found]}

    @app.post(
        "/v1/bots/{bot}/memories",
        response_model=MemoryOut, response_model_exclude_unset=True,
        status_code=201,
        responses={200: {"model": MemoryOut, "description": "The same text was already remembered"}, **ERRORS},
        tags=["memories"],
    )
    def add_memory(bot: Bot, body: NewMemory, eng: Authed, response: Response) -> dict:
        """Add a fact; the same text in other case or spacing answers 200 with the memory already there."""
        memory, created = eng.service.add_fact(
            bot, body.text, user=body.userId, server=body.serverId, project=body.project, saved_by="owner"
        )
        response.status_code = 201 if created else 200
        return memory.to_json()

    @app.post("/v1/bots/{bot}/messages", response_model=MessageBatchResult, responses=ERRORS, tags=["memories"])
    def add_messages(bot: Bot, body: MessageBatch, eng: Authed) -> dict:
        """Store chat messages (kind `message`) in one batch; a message id already stored is not stored again."""
        messages = [
            ChatMessage(
                source_id=m.id, text=m.text, user=m.userId, server=m.serverId, project=m.project,
                created_at=int(m.createdAt.timestamp() * 1000) if m.createdAt else None,
                content=m.content, saved_by=m.savedBy, thread=m.threadId,
            )
            for m in body.messages
        ]
        memories, created = eng.service.add_messages(bot, messages)
        return {"created": created, "ids": [format_memory_id(m.id) for m in memories]}

    @app.get("/v1/bots/{bot}/memories/{memory_id}", response_model=MemoryOut, response_model_exclude_unset=True, responses={404: {"model": ErrorResponse}, **ERRORS}, tags=["memories"])
    def get_memory(bot: Bot, memory_id: Annotated[str, Path(examples=["mem:12"])], eng: Authed) -> dict:
        """One memory by id (`12` or `mem:12`)."""
        return eng.service.get(bot, parse_memory_id(memory_id)).to_json()

    @app.patch("/v1/bots/{bot}/memories/{memory_id}", response_model=MemoryOut, response_model_exclude_unset=True, responses={404: {"model": ErrorResponse}, **ERRORS}, tags=["memories"])
    def change_memory(bot: Bot, memory_id: Annotated[str, Path(examples=["mem:12"])], body: MemoryChange, eng: Authed) -> dict:
        """Change a memory's text; if it now says what another says, that other memory stands and comes back."""
        return eng.service.update(bot, parse_memory_id(memory_id), body.text).to_json()

    @app.delete("/v1/bots/{bot}/memories/{memory_id}", status_code=204, responses={404: {"model": ErrorResponse}, **ERRORS}, tags=["memories"])
    def remove_memory(bot: Bot, memory_id: Annotated[str, Path(examples=["mem:12"])], eng: Authed) -> Response:
        """Remove one memory from both stores."""
        eng.service.remove(bot, parse_memory_id(memory_id))
        return Response(status_code=204)

    @app.get("/v1/settings", response_model=EmbeddingSettingsOut, responses=ERRORS, tags=["settings"])
    def get_settings_route(eng: Authed) -> dict:
        """Where vectors come from."""
        return eng.embedding.current().model_dump()

    @app.patch("/v1/settings", response_model=EmbeddingSettingsOut, responses=ERRORS, tags=["settings"])
    async def change_settings(request: Request, eng: Authed) -> dict:
        """Change only what the body names. A new model embeds a test string first; if that fails the
        answer is 400 with what failed and the old setting stays. Vectors of a new model fill in behind."""
        from starlette.concurrency import run_in_threadpool

        try:
            patch = await request.json()
        except ValueError:
            raise InvalidInput("the body must be a JSON object")
        if not isinstance(patch, dict):
            raise InvalidInput("the body must be a JSON object")
        return (await run_in_threadpool(eng.embedding.change, patch)).model_dump()

    @app.get("/v1/settings/embedding", response_model=EmbeddingProgress, responses=ERRORS, tags=["settings"])
    def embedding_progress(eng: Authed) -> dict:
        """How far vectors have got for the current model."""
        return eng.embedding.progress()

    @app.delete("/v1/bots/{bot}/users/{user_id}/memories", response_model=ForgetResult, responses=ERRORS, tags=["memories"])
    def forget_user(bot: Bot, user_id: str, eng: Authed) -> dict:
        """Forget a user: every record and vector of this bot attributed to them, everywhere."""
        return {"deleted": eng.service.forget(bot, user_id)}

    @app.post("/discord/interactions", include_in_schema=False)
    async def discord_interactions(request: Request) -> Response:
        """Discord's interactions webhook (the same handler as the interactions function)."""
        from starlette.concurrency import run_in_threadpool

        from ..discord.interactions import consent_status, handle_interaction
        from ..discord.settings import get_discord_settings

        settings = (discord_settings_factory or get_discord_settings)()
        raw = await request.body()
        status, body = await run_in_threadpool(
            handle_interaction, raw, dict(request.headers), settings, lambda: engine().queue, consent_status(settings)
        )
        return JSONResponse(body, status_code=status)

    if proxy_factory is not None:
        from ..proxy.routes import proxy_router

        def build_mcp():
            from ..proxy.mcp_tools import MCPEndpoint

            return MCPEndpoint(proxy_factory)

        endpoint = LazyASGI(build_mcp)
        app.add_route("/mcp", endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
        app.add_route("/mcp/", endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
        app.include_router(proxy_router(proxy_factory))
    return app
