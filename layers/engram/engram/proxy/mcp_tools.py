"""The MCP endpoint: explicit memory tools for LibreChat agents (streamable HTTP, stateless, JSON
responses, bearer key, the same identity headers as the proxy)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import StrictBool
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from .. import __version__
from ..errors import EngramError
from ..problems import problem_response
from ..text import format_memory_id
from . import librechat
from .identity import user_key_of
from .memory import Turn
from .projects import ChatFacts

if TYPE_CHECKING:  # the wiring's type: the process's parts are handed in, never looked up here
    from .runtime import Proxy

T = TypeVar("T")

INSTRUCTIONS = (
    "engram already recalls relevant memories automatically before every turn and stores durable facts "
    "after it. Reach for these tools only when that is not enough: to search for something the automatic "
    "recall missed, to save something the user explicitly asks you to remember, to correct or delete a "
    "memory, or to turn automatic memory on or off for this chat."
)


def _identity(proxy: Proxy, headers: Mapping[str, str]) -> tuple[str, str | None]:
    """(user, conversation) from LibreChat's request headers (a user key's user is set there by
    proxy.identity); a tool error when the user is missing or a placeholder was left unresolved (every user
    of the install would share one memory)."""
    s = proxy.settings
    user = headers.get(s.user_header)
    if not user or not user.strip():
        raise ToolError(
            f"the {s.user_header} header is required with the proxy key; or connect with a user's own key "
            "(POST /v1/bots/{bot}/users/{userId}/keys), which says who the user is"
        )
    conversation = headers.get(s.conversation_header)
    for header, value in ((s.user_header, user), (s.conversation_header, conversation)):
        if librechat.unresolved(value):
            raise ToolError(
                f"the {header} header is {value!r}: LibreChat left its placeholder unresolved; set it "
                "under the MCP server's requestHeaders in librechat.yaml"
            )
    return user, conversation


async def turn_of(proxy: Proxy, ctx: Context) -> Turn:
    """The turn a tool call belongs to: its user, chat and the chat's project."""
    headers, s = ctx.headers or {}, proxy.settings
    user, conversation = _identity(proxy, headers)
    chat = await run_in_threadpool(proxy.projects.chat, user, conversation) if conversation else ChatFacts()
    return Turn(
        user=user,
        conversation=conversation,
        project=chat.project,
        authorized=True,
        project_name=chat.project_name,
        author=librechat.author_content(headers.get(s.user_name_header), headers.get(s.username_header)),
    )


async def call(fn: Callable[..., T], *args: Any) -> T:
    """A memory rule off the event loop; its anticipated failures reach the client (and the model) as a
    tool error with the reason."""
    try:
        return await run_in_threadpool(fn, *args)
    except EngramError as exc:
        raise ToolError(exc.message) from exc


def build_mcp_server(proxy_factory: Callable[[], Proxy]) -> MCPServer:
    """The MCP server with engram's memory tools."""
    server = MCPServer(name="engram", instructions=INSTRUCTIONS, version=__version__)

    async def proxy_and_turn(ctx: Context) -> tuple[Proxy, Turn]:
        proxy = proxy_factory()
        return proxy, await turn_of(proxy, ctx)

    @server.tool()
    async def search_memory(query: str, ctx: Context, limit: int = 10, min_score: float = 0.0) -> str:
        """Search this user's memories by words and meaning (scoped like automatic recall); a query naming a
        day ("on 9 November 2022", "yesterday") favours what was saved that day; `min_score` (0 to 1): only
        memories at least this relevant (0.5: as close as a question and its answer)."""
        proxy, turn = await proxy_and_turn(ctx)
        found = await call(proxy.memory.search, turn, query, max(1, min(limit, 50)), min_score)
        return "\n".join(f"{format_memory_id(m.id)}: {m.text}" for m in found) or "Nothing found."

    @server.tool()
    async def save_memory(text: str, ctx: Context, ttl: int | None = None) -> str:
        """Store a memory now (one fact, at most 1,000 characters); `ttl`: seconds it lasts (a door code,
        a trip), after which it is forgotten; left out: for good."""
        proxy, turn = await proxy_and_turn(ctx)
        memory, created = await call(proxy.memory.save, turn, text, ttl)
        return (
            f"{'Saved' if created else 'Already remembered'} as {format_memory_id(memory.id)}: {memory.text}"
        )

    @server.tool()
    async def update_memory(id: str, text: str, ctx: Context) -> str:
        """Correct one of this user's memories (id like mem:12); if it now says what another says, they
        merge."""
        proxy, turn = await proxy_and_turn(ctx)
        memory = await call(proxy.memory.update, turn, id, text)
        return f"{format_memory_id(memory.id)} now says: {memory.text}"

    @server.tool()
    async def forget_memory(id: str, ctx: Context) -> str:
        """Delete one of this user's memories (id like mem:12)."""
        proxy, turn = await proxy_and_turn(ctx)
        memory = await call(proxy.memory.forget, turn, id)
        return f"Forgot {format_memory_id(memory.id)}: {memory.text}"

    @server.tool()
    async def forget_me(confirm: StrictBool, ctx: Context) -> str:
        """Forget everything engram keeps about this user (every memory, settings, anything queued), for
        good; needs confirm=true, the JSON boolean (a string "true" is refused: a destructive confirmation
        is never coerced). The same forget as the Memory API's and Discord's."""
        proxy, turn = await proxy_and_turn(ctx)
        if confirm is not True:
            return "Nothing forgotten: call forget_me with confirm=true to forget everything about you."
        return await call(proxy.memory.forget_me, turn)

    @server.tool()
    async def memory_status(ctx: Context) -> str:
        """Whether automatic memory is on for this chat, why, and the chat's project."""
        proxy, turn = await proxy_and_turn(ctx)
        return await call(proxy.memory.status, turn)

    @server.tool()
    async def set_memory_enabled(enabled: bool, ctx: Context) -> str:
        """Turn automatic memory on or off for this chat."""
        proxy, turn = await proxy_and_turn(ctx)
        if not turn.conversation:
            raise ToolError(f"the {proxy.settings.conversation_header} header is required")
        await call(proxy.memory.set_enabled, turn, enabled)
        return f"Memory is now {'on' if enabled else 'off'} for this chat."

    return server


WRONG_KEY = (
    "missing or wrong bearer key: /mcp takes engram's proxy key (ENGRAM_PROXY_KEY) or a key minted for one "
    "user (POST /v1/bots/{bot}/users/{userId}/keys), as Authorization: Bearer <key>"
)
UNAUTHORIZED = -32001  # JSON-RPC's server-error range: the request was not let in


def refused(message: str) -> JSONResponse:
    """A 401 MCP clients show as what it is: a JSON-RPC error in the body (the `mcp` client surfaces a
    JSON-RPC error from a non-2xx answer; anything else becomes an opaque -32603), with WWW-Authenticate."""
    return JSONResponse(
        {"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED, "message": message}},
        status_code=401,
        headers={"www-authenticate": 'Bearer realm="engram"'},
    )


class MCPEndpoint:
    """ASGI app for /mcp: checks the bearer key, then serves each request with a fresh stateless
    session manager, so it needs no lifespan (Mangum runs one per invocation; uvicorn once)."""

    def __init__(self, proxy_factory: Callable[[], Proxy]):
        self.proxy_factory = proxy_factory
        self.server = build_mcp_server(proxy_factory)
        # API Gateway and Function URL hosts vary; the bearer key is what keeps strangers out.
        self.security = TransportSecuritySettings(enable_dns_rebinding_protection=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        proxy = self.proxy_factory()
        if not proxy.settings.mcp_enabled:
            await problem_response(404, "not_found", "MCP is off (MCP_ENABLED=false)")(scope, receive, send)
            return
        if not (scheme.lower() == "bearer" and (proxy.key_matches(token) or user_key_of(scope) is not None)):
            await refused(WRONG_KEY)(scope, receive, send)
            return
        if scope["method"] == "GET":
            # Stateless and JSON-only: no server-to-client stream to offer. 405 is the spec's answer,
            # and clients (LibreChat's SDK) then stop asking, instead of holding a stream (and, on
            # Lambda, an invocation) open until the timeout.
            response = problem_response(
                405,
                "method_not_allowed",
                "this MCP server offers no event stream; POST requests",
                headers={"Allow": "POST, DELETE"},
            )
            await response(scope, receive, send)
            return
        manager = StreamableHTTPSessionManager(
            app=self.server._lowlevel_server,
            json_response=True,
            stateless=True,
            security_settings=self.security,
        )
        async with manager.run():
            await manager.handle_request(scope, receive, send)
