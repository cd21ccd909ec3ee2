"""The proxy's HTTP routes: /<upstream>/v1/chat/completions, /<upstream>/v1/messages (a chat turn:
engram.proxy.turn), and everything else under /<upstream>/ forwarded verbatim (engram.proxy.relay)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.convertors import StringConvertor, register_url_convertor

from ..config.proxy import Upstream
from .relay import Door, error, open_door, relay
from .turn import chat_turn

if TYPE_CHECKING:  # handed the proxy's parts by the app, never looking them up
    from .runtime import Proxy

PROXY_BODY = 16 * 1024 * 1024
# The Memory API owns /v1/...: an upstream named "v1" never matches, so a mistyped API path or method is
# the API's 404 or 405, not a relay to an upstream that does not exist.
API_PREFIX = "v1"


class UpstreamName(StringConvertor):
    """A path segment naming an upstream: any segment but the Memory API's own prefix."""

    regex = f"(?!{API_PREFIX}/)[^/]+"


register_url_convertor("upstream", UpstreamName())
ANTHROPIC_BODY = 32 * 1000 * 1000  # Anthropic's own request limit for the Messages API (32 MB)


def _contained(upstream: Upstream, path: str, raw_path: bytes) -> bool:
    """Whether a relayed path stays under the upstream's base URL: no dot segments, empty segments,
    backslashes or encoded slashes (decoded or not), and the URL it makes still starts with the base."""
    raw = raw_path.decode("latin-1").lower()
    if "%2f" in raw or "%5c" in raw:
        return False
    segments = path.split("/")
    if any(seg in (".", "..") or "\\" in seg for seg in segments) or "" in segments[:-1]:
        return False
    base = httpx.URL(upstream.baseUrl)
    target = httpx.URL(upstream.url(path))
    return (target.host, target.port, target.scheme) == (
        base.host,
        base.port,
        base.scheme,
    ) and target.path.startswith(base.path.rstrip("/") + "/")


def proxy_router(proxy_factory: Callable[[], Proxy]) -> APIRouter:
    """Routes for every configured upstream (looked up per request, so settings can change in tests)."""
    # A chat turn with images and a long context fits; Lambda's own request limit is 6 MB.
    router = APIRouter(max_body_size=PROXY_BODY)

    @router.post("/{name:upstream}/v1/chat/completions", include_in_schema=False)
    async def openai_chat(name: str, request: Request) -> Response:
        return await chat_turn(proxy_factory(), name, request, "openai")

    @router.post("/{name:upstream}/v1/messages", include_in_schema=False, max_body_size=ANTHROPIC_BODY)
    async def anthropic_messages(name: str, request: Request) -> Response:
        return await chat_turn(proxy_factory(), name, request, "anthropic")

    @router.api_route(
        "/{name:upstream}/{path:path}",
        methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        include_in_schema=False,
    )
    async def verbatim(name: str, path: str, request: Request) -> Response:
        door = open_door(proxy_factory(), name, request)
        if not isinstance(door, Door):
            return door
        if not _contained(door.upstream, path, request.scope.get("raw_path") or b""):
            return error(
                400, "invalid", f"the path must stay under upstream {name!r}'s base URL", door.upstream.api
            )
        return await relay(door, request, path, await request.body())

    return router
