"""Getting a request to its upstream and the answer back: who may use which upstream (the door), the
headers that cross, errors in the caller's wire format, replies engram speaks itself, and the relay that
streams the upstream's answer and runs the post-turn work before the reply ends."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..access_keys import looks_like_user_key
from ..config.proxy import Upstream
from ..problems import PROBLEM_JSON, auth_challenge, in_anthropic_shape, problem, problem_response
from . import wire
from .identity import presented_token, user_key_of
from .telemetry import TurnTrace

if TYPE_CHECKING:  # the wiring's type: the process's parts are handed in, never looked up here
    from .runtime import Proxy

log = logging.getLogger(__name__)
T = TypeVar("T")

# Never relayed: hop-by-hop headers, lengths httpx recomputes, and engram's own credentials.
_DROP_REQUEST = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "accept-encoding",
    "x-engram-key",
    "upgrade",
}
_DROP_RESPONSE = {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}

# What runs once the upstream's answer is complete, with the assistant's text
After = Callable[[str], None]


def error(status: int, code: str, message: str, api: str | None = None) -> JSONResponse:
    """The proxy's own error as problem details, its `error` member in the caller's wire format:
    Anthropic's SDK reads `error.type`, OpenAI's `error.message` (both parse the body whatever its media
    type). An upstream's own errors are relayed as they came."""
    if api == "anthropic":
        body = in_anthropic_shape(problem(status, code, message), _ANTHROPIC_TYPES.get(status, "api_error"))
        return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=auth_challenge(status))
    response: JSONResponse = problem_response(
        status, code, message, {"code": code, "type": code, "message": message}
    )
    return response


@dataclass(frozen=True)
class Door:
    """A request let through to an upstream: the proxy, the upstream, and whether the caller showed
    engram's key (an open upstream lets callers without it through, as a plain pass-through)."""

    proxy: Proxy
    upstream: Upstream
    authorized: bool


def open_door(proxy: Proxy, name: str, request: Request, api: str | None = None) -> Door | JSONResponse:
    """The upstream and whether the caller holds engram's proxy key, or the refusal; checked before any
    body is read."""
    upstream = proxy.settings.upstream(name)
    if upstream is None:
        return error(404, "not_found", f"no upstream named {name!r}", api)
    # engram's proxy key, or a user's key of this bot (let in by proxy.identity, its user the identity)
    authorized = proxy.key_matches(presented_token(request.headers)) or user_key_of(request.scope) is not None
    if not authorized and not upstream.open:
        return error(
            401,
            "unauthorized",
            f"upstream {name!r} needs engram's proxy key or a user's key (Authorization: Bearer, x-api-key "
            "or x-engram-key)",
            api or upstream.api,
        )
    return Door(proxy, upstream, authorized)


def _not_relayed(name: str, proxy: Proxy) -> bool:
    """Hop-by-hop, engram's own, and LibreChat's identity headers (who the user is, which chat: engram's
    to read, no provider's business)."""
    name, s = name.lower(), proxy.settings
    identity = tuple(
        h.lower()
        for h in (
            s.user_header,
            s.conversation_header,
            s.parent_message_header,
            s.user_name_header,
            s.username_header,
        )
    )
    return name in _DROP_REQUEST or name.startswith("x-librechat-") or name in identity


def _without_engram_keys(headers: dict[str, str], proxy: Proxy) -> dict[str, str]:
    """engram's own keys (the proxy key, a user's) never reach a provider, whichever header they came in."""

    def engrams(key: str | None) -> bool:
        return bool(key) and (proxy.key_matches(key) or looks_like_user_key(key))

    if engrams(headers.get("authorization", "").partition(" ")[2].strip() or None):
        headers.pop("authorization", None)
    if engrams(headers.get("x-api-key")):
        headers.pop("x-api-key", None)
    return headers


def _outgoing_headers(request: Request, proxy: Proxy, upstream: Upstream) -> dict[str, str]:
    headers = _without_engram_keys(
        {k: v for k, v in request.headers.items() if not _not_relayed(k, proxy)}, proxy
    )
    if upstream.apiKey:
        # the caller showed engram's key; the provider gets the key we hold for it
        headers.pop("authorization", None)
        headers.pop("x-api-key", None)
        if upstream.api == "anthropic":
            headers["x-api-key"] = upstream.apiKey
        else:
            headers["authorization"] = f"Bearer {upstream.apiKey}"
    return headers


async def timed(proxy: Proxy, phase: str, fn: Callable[[], T]) -> T:
    """Run blocking work off the event loop, counted per phase."""
    started = time.perf_counter()
    ok = False
    try:
        result = await run_in_threadpool(fn)
        ok = True
        return result
    finally:
        proxy.counters.record(phase, (time.perf_counter() - started) * 1000, ok)


def speak(api: wire.Api, model: str, text: str, stream: bool, body: dict[str, Any]) -> Response:
    """A reply engram gives itself, in the caller's wire format."""
    if stream:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            wire.reply_stream(api, model, text, include_usage), media_type="text/event-stream"
        )
    return JSONResponse(wire.reply_json(api, model, text))


@dataclass(frozen=True)
class Reading:
    """How an answer is read on its way back: in which wire format (None: not read at all), what runs on
    the assistant's text once it is complete, the turn's trace, and the model it asked for."""

    api: wire.Api | None = None
    after: After | None = None
    trace: TurnTrace | None = None
    model: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # engram's own, added to the answer's


@dataclass(frozen=True)
class End:
    """How an answer ended: whether it came to its end (not cut off), and why (finish or stop reason)."""

    reached: bool
    stop: str | None

    @property
    def whole(self) -> bool:
        """The turn's answer, complete: reached its end, and not to call tools."""
        return self.reached and self.stop not in wire.TOOL_STOPS


class _Exchange:
    """One relayed call's bookkeeping: its timing, its trace's generation, and the post-turn work run
    exactly once when the answer is complete (or the caller hung up)."""

    def __init__(self, proxy: Proxy, reading: Reading) -> None:
        self._proxy = proxy
        self._reading = reading
        self._trace = reading.trace or TurnTrace()
        self._generation = self._trace.generation(reading.model) if reading.api else None
        self._started = time.perf_counter()
        self.finished = False

    def record(self, ok: bool) -> None:
        self._proxy.counters.record("upstream", (time.perf_counter() - self._started) * 1000, ok)

    async def finish(self, status: int, usage: dict[str, Any] | None, text: str, end: End) -> None:
        """The post-turn work, off the event loop; nothing here may fail the turn (the reply has gone)."""
        self.finished = True
        try:
            await run_in_threadpool(self._finish, status, usage, text, end)
        except Exception:
            log.exception("post-turn work failed")

    def _finish(self, status: int, usage: dict[str, Any] | None, text: str, end: End) -> None:
        generation = self._generation
        if generation is not None:
            generation.update(
                usage_details=TurnTrace.usage(self._reading.api or "", usage),
                output=text[:2000] or None,
                level="DEFAULT" if status < 400 else "ERROR",
            )
            generation.end()
        # the turn's answer, whole: not cut off by Stop, not a round that asks for tools (its answer
        # comes in the round after them)
        if self._reading.after and status == 200 and text and end.whole:
            self._reading.after(text)
        if generation is not None:
            self._trace.end()
            self._proxy.telemetry.flush()

    async def whole(self, response: httpx.Response, headers: dict[str, str]) -> Response:
        """A non-streamed answer, read whole; the post-turn work before the reply, not after it: behind the
        Lambda Web Adapter the sandbox freezes once the response has gone, so the extraction job must be on
        the queue first (a few ms)."""
        data = await response.aread()
        await response.aclose()
        self.record(response.status_code < 500)
        text, usage, stop = "", None, None
        api = self._reading.api
        if api and response.status_code == 200:
            with contextlib.suppress(ValueError, AttributeError):
                parsed = json.loads(data)
                text, usage, stop = (
                    wire.reply_text(api, parsed),
                    parsed.get("usage"),
                    wire.reply_stop(api, parsed),
                )
        await self.finish(response.status_code, usage, text, End(True, stop))
        return Response(data, status_code=response.status_code, headers=headers)

    async def chunks(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """A streamed answer, chunk by chunk; the post-turn work runs at its end event, before the caller
        sees it (SDKs stop reading there), or, when it never came, once the stream closes."""
        api = self._reading.api
        capture = wire.StreamCapture(api) if api else None
        try:
            # decoded: httpx asked for gzip itself, and content-encoding is not relayed
            async for chunk in response.aiter_bytes():
                if capture:
                    capture.feed(chunk)
                    if capture.finished and not self.finished:
                        end = End(True, capture.stop)
                        await self.finish(response.status_code, capture.usage, capture.text, end)
                yield chunk
        finally:
            # a client that hangs up right after the last event cancels this generator: the post-turn
            # work (extraction, the trace) must run anyway
            with anyio.CancelScope(shield=True):
                await response.aclose()
                self.record(response.status_code < 500)
                if not self.finished:  # the stream closed before its end event: cut off, or ended without it
                    end = End(capture.ended, capture.stop) if capture else End(False, None)
                    await self.finish(
                        response.status_code,
                        capture.usage if capture else None,
                        capture.text if capture else "",
                        end,
                    )


async def relay(
    door: Door, request: Request, path: str, content: bytes, reading: Reading | None = None
) -> Response:
    """Send to the upstream and relay its answer: streamed chunk by chunk with its status and headers,
    or whole. Once the answer is complete, `reading.after(text)` gets the assistant's text and the turn's
    trace gets the upstream generation (model, usage) and is closed — before the reply ends (after the
    last streamed chunk, before the response is complete), since on Lambda nothing runs after it."""
    proxy, upstream = door.proxy, door.upstream
    exchange = _Exchange(proxy, reading or Reading())
    url = upstream.url(path)
    if request.url.query:
        url = f"{url}?{request.url.query}"
    outgoing = proxy.client.build_request(
        request.method, url, headers=_outgoing_headers(request, proxy, upstream), content=content
    )
    try:
        response = await proxy.client.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        exchange.record(ok=False)
        await exchange.finish(502, None, "", End(False, None))
        return error(
            502,
            "upstream_unavailable",
            f"upstream {upstream.name!r} did not answer: {type(exc).__name__}",
            upstream.api,  # in the wire format its callers speak (Anthropic's SDK reads `error.type`)
        )
    headers = {k: v for k, v in response.headers.items() if k.lower() not in _DROP_RESPONSE}
    headers |= reading.headers if reading else {}
    if "text/event-stream" not in response.headers.get("content-type", ""):
        return await exchange.whole(response, headers)
    return StreamingResponse(exchange.chunks(response), status_code=response.status_code, headers=headers)
