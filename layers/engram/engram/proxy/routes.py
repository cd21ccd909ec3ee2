"""The proxy's HTTP routes: /<upstream>/v1/chat/completions, /<upstream>/v1/messages, and everything
else under /<upstream>/ forwarded verbatim. Recall and the date go in before, extraction is queued after."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable

import anyio
import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..errors import EngramError
from ..jobs import ExtractJob
from ..text import scrub
from . import librechat, wire
from .memory import Turn, datetime_block, explicit_fact, is_command
from .projects import ChatFacts
from .runtime import Proxy, get_proxy
from .telemetry import TurnTrace

log = logging.getLogger(__name__)

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


PROXY_BODY = 16 * 1024 * 1024
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


def _error(status: int, code: str, message: str, api: str | None = None) -> JSONResponse:
    """An error in the caller's wire format: Anthropic's SDK reads `error.type`, OpenAI's `error.message`."""
    if api == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return JSONResponse(
            {"type": "error", "error": {"type": kind, "message": message}}, status_code=status
        )
    return JSONResponse({"error": {"code": code, "type": code, "message": message}}, status_code=status)


def _contained(upstream, path: str, raw_path: bytes) -> bool:
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


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return request.headers.get("x-engram-key") or bearer or request.headers.get("x-api-key")


def _outgoing_headers(request: Request, proxy: Proxy, upstream) -> dict[str, str]:
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
    # engram's own key never reaches a provider, whichever header the caller put it in
    bearer = headers.get("authorization", "").partition(" ")[2].strip() or None
    if bearer and proxy.key_matches(bearer):
        headers.pop("authorization", None)
    if proxy.key_matches(headers.get("x-api-key")):
        headers.pop("x-api-key", None)
    if upstream.apiKey:
        # the caller showed engram's key; the provider gets the key we hold for it
        headers.pop("authorization", None)
        headers.pop("x-api-key", None)
        if upstream.api == "anthropic":
            headers["x-api-key"] = upstream.apiKey
        else:
            headers["authorization"] = f"Bearer {upstream.apiKey}"
    return headers


def proxy_router(proxy_factory: Callable[[], Proxy] = get_proxy) -> APIRouter:
    """Routes for every configured upstream (looked up per request, so settings can change in tests)."""
    # A chat turn with images and a long context fits; Lambda's own request limit is 6 MB.
    router = APIRouter(max_body_size=PROXY_BODY)

    async def resolve(name: str, request: Request, api: str | None = None):
        """The upstream and whether the caller holds engram's proxy key; checked before any body is read."""
        proxy = proxy_factory()
        upstream = proxy.settings.upstream(name)
        if upstream is None:
            return proxy, None, _error(404, "not_found", f"no upstream named {name!r}", api)
        authorized = proxy.key_matches(_presented_key(request))
        if not authorized and not upstream.open:
            return (
                proxy,
                upstream,
                _error(
                    401,
                    "unauthorized",
                    f"upstream {name!r} needs engram's proxy key "
                    "(Authorization: Bearer, x-api-key or x-engram-key)",
                    api or upstream.api,
                ),
            )
        return proxy, upstream, authorized

    @router.post("/{name}/v1/chat/completions", include_in_schema=False)
    async def openai_chat(name: str, request: Request):
        return await chat_turn(name, request, "openai")

    @router.post("/{name}/v1/messages", include_in_schema=False)
    async def anthropic_messages(name: str, request: Request):
        return await chat_turn(name, request, "anthropic")

    @router.api_route(
        "/{name}/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False
    )
    async def verbatim(name: str, path: str, request: Request):
        proxy, upstream, outcome = await resolve(name, request)
        if isinstance(outcome, Response):
            return outcome
        if not _contained(upstream, path, request.scope.get("raw_path") or b""):
            return _error(
                400, "invalid", f"the path must stay under upstream {name!r}'s base URL", upstream.api
            )
        return await relay(proxy, upstream, request, path, await request.body(), None, None)

    async def chat_turn(name: str, request: Request, api: wire.Api):
        proxy, upstream, outcome = await resolve(name, request, api)
        if isinstance(outcome, Response):
            return outcome
        authorized = outcome
        path = "v1/chat/completions" if api == "openai" else "v1/messages"
        raw = await request.body()
        if upstream.api != api:  # an OpenAI route on an Anthropic upstream (or back): not ours to reshape
            return await relay(proxy, upstream, request, path, raw, None, None)
        try:
            body = json.loads(raw)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise ValueError("no messages")
        except ValueError:
            return _error(
                400, "invalid", "the request body must be a JSON object with a `messages` list", api
            )
        s = proxy.settings
        refused = _unresolved_identity(s, request, api) if authorized else None
        if refused is not None:
            return refused
        user = request.headers.get(s.user_header) or None
        conversation = request.headers.get(s.conversation_header) or None
        model = scrub(str(body.get("model") or ""))
        kind = librechat.side_call(body, s.side_call_markers)
        if kind is not None:  # LibreChat asking about the chat (a title, a summary), not the user speaking
            log.info("a LibreChat side call (%s) passed through untouched", kind)
            return await relay(proxy, upstream, request, path, raw, None, None)
        inherited = librechat.setting_in_history(body, s.command_prefix, is_command)
        body = librechat.without_commands(body, s.command_prefix, is_command)
        index, said = librechat.user_turn(body)  # the turn's own words: no prepended file, no tool result
        tool_round = librechat.in_tool_round(body)
        last = scrub(said)  # what engram only reads (queries, extraction); the upstream gets the body as sent
        command = not tool_round and is_command(last, s.command_prefix)
        if command and not conversation:  # answered, never sent to the model, even without the headers
            answer = await run_in_threadpool(
                proxy.memory.command,
                Turn(user=user, conversation=None, project=None, authorized=authorized),
                said,
            )
            return speak(api, model, answer, body.get("stream") is True, body)
        # /memory commands never call a model, so they are never traced
        trace = (
            TurnTrace()
            if command
            else proxy.telemetry.turn(
                conversation=conversation, user=user, upstream=upstream.name, model=model
            )
        )
        if not conversation:  # not a LibreChat chat (no conversation id): untouched
            return await relay(proxy, upstream, request, path, raw, api, None, trace, model)
        stream = body.get("stream") is True
        started = time.perf_counter()
        chat = ChatFacts()
        try:
            with trace.span("resolve-context"):
                chat = await timed(
                    proxy, "project", lambda: proxy.projects.chat(user, conversation) if user else ChatFacts()
                )
        except Exception:  # memory's context failing never fails the turn
            log.exception("project lookup failed; answering without a project")
        project_ms = (time.perf_counter() - started) * 1000
        turn = Turn(
            user=user,
            conversation=conversation,
            project=chat.project,
            authorized=authorized,
            project_name=chat.project_name,
        )
        if inherited is not None and authorized:  # a fork: the setting its history set comes with it
            await run_in_threadpool(proxy.memory.inherit, turn, inherited)
        if command:
            answer = await run_in_threadpool(proxy.memory.command, turn, said)
            return speak(api, model, answer, stream, body)
        # LibreChat's own opt-outs: personalization memories off means no memory at all; a temporary chat is
        # deleted by LibreChat, so nothing is kept from it (what is remembered may still be recalled)
        turn_key = (conversation, hashlib.sha256(said.encode("utf-8", "surrogatepass")).hexdigest())
        # the same words again in the same chat, not in a tool round: LibreChat's regenerate (extracted once)
        regenerated = not tool_round and turn_key in proxy.turn_started
        memory_on, block = await _turn_block(
            proxy, turn, body, turn_key, tool_round, trace, chat.memories_off
        )
        keep = memory_on and not chat.temporary and not regenerated
        spent = (time.perf_counter() - started) * 1000
        if spent > s.slow_call_ms:
            phases = {"project": round(project_ms, 1), "settingsAndRecall": round(spent - project_ms, 1)}
            log.warning(
                "memory added %d ms to a chat turn before the model was called: %s (slowest phase: %s)",
                spent,
                json.dumps(phases),
                max(phases, key=lambda phase: phases[phase]),
                extra={"phases": phases, "conversation": conversation},
            )
        out = librechat.place_block(api, body, index, block) if block else dict(body)
        if stream and api == "openai" and upstream.forceIncludeUsage:
            out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        after = None
        if keep and s.write_mode != "off" and last:
            mode = "explicit" if s.write_mode == "explicit" else "llm"
            if mode == "llm" or explicit_fact(last):

                def after(text: str):
                    if not text.strip():  # tool calls only: the answer comes after the tool rounds
                        return
                    with trace.span("memory-write", mode=mode):
                        queue_extraction(proxy, turn, upstream.name, model, mode, last, text)

        return await relay(proxy, upstream, request, path, json.dumps(out).encode(), api, after, trace, model)

    return router


async def timed(proxy: Proxy, phase: str, fn):
    """Run blocking work off the event loop, counted per phase."""
    started = time.perf_counter()
    ok = False
    try:
        result = await run_in_threadpool(fn)
        ok = True
        return result
    finally:
        proxy.counters.record(phase, (time.perf_counter() - started) * 1000, ok)


def speak(api: wire.Api, model: str, text: str, stream: bool, body: dict) -> Response:
    """A reply engram gives itself, in the caller's wire format."""
    if stream:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            wire.reply_stream(api, model, text, include_usage), media_type="text/event-stream"
        )
    return JSONResponse(wire.reply_json(api, model, text))


def _unresolved_identity(s, request: Request, api: wire.Api) -> JSONResponse | None:
    """A refusal for identity headers LibreChat sent empty or with its placeholder unresolved: taken as an
    identity, every user of such an install would share one memory."""
    for header, placeholder in (
        (s.user_header, "{{LIBRECHAT_USER_ID}}"),
        (s.conversation_header, "{{LIBRECHAT_BODY_CONVERSATIONID}}"),
    ):
        value = request.headers.get(header)
        if value is not None and (not value.strip() or librechat.unresolved(value)):
            return _error(
                400,
                "invalid_identity",
                f"the {header} header is {value!r}: LibreChat sent it empty or with its placeholder "
                f"unresolved. Set it under the endpoint's headers in librechat.yaml as {placeholder!r}, "
                "on a LibreChat version that fills it in for every request (title calls of some versions "
                "did not: LibreChat issues #8931, #14580); engram stores nothing under it.",
                api,
            )
    return None


async def _turn_block(
    proxy: Proxy,
    turn: Turn,
    body: dict,
    key: tuple[str | None, str],
    tool_round: bool,
    trace,
    memories_off: bool = False,
) -> tuple[bool, str]:
    """(memory on for this chat, the block to place at the turn's user message: the date and the recalled
    memories). A tool round tells the time its turn started (and its recall is the cached one within the
    recall cache's TTL), so the block stays the same byte for byte across the rounds of one turn."""
    s = proxy.settings
    if not tool_round or key not in proxy.turn_started:
        proxy.turn_started[key] = datetime_block()
    memory_on = False
    blocks = [proxy.turn_started[key]] if s.datetime_enabled else []
    try:
        if turn.authorized and turn.user and not memories_off:
            memory_on, _ = await run_in_threadpool(proxy.memory.enabled, turn)
        if memory_on and s.recall_enabled:
            turns = [librechat.own_text(t) for t in wire.user_turns(body)]
            query = scrub("\n".join([t for t in turns if t][-s.query_message_count :]))
            if query.strip() or s.recall_mode != "relevant":
                with trace.span("recall", mode=s.recall_mode) as span:
                    block, found = await timed(proxy, "recall", lambda: proxy.memory.context(turn, query))
                    span.update(metadata={"results": found})
                if block:
                    blocks.append(block)
    except EngramError as exc:  # memory failing never fails the turn
        log.warning("memory unavailable, answering without it: %s", exc.message)
    except Exception:
        log.exception("memory failed, answering without it")
    return memory_on, "\n\n".join(blocks)


def queue_extraction(
    proxy: Proxy, turn: Turn, upstream: str, model: str, mode: str, user_text: str, assistant_text: str
) -> None:
    """Hand the exchange to the worker; a queue failure costs the memory, never the reply."""
    try:
        job = ExtractJob(
            bot=proxy.settings.bot,
            user=turn.user,
            conversation=turn.conversation,
            project=turn.project,
            upstream=upstream,
            model=model or None,
            mode=mode,
            user_text=user_text[:20_000],
            assistant_text=assistant_text[:20_000],
            queued_at=turn.received_at,  # a forget that landed while the answer streamed wins
        )
        proxy.engine.queue.send(job)
    except Exception:
        log.exception("could not queue memory extraction")


async def relay(
    proxy: Proxy,
    upstream,
    request: Request,
    path: str,
    content: bytes,
    api: wire.Api | None,
    after,
    trace=None,
    model: str = "",
):
    """Send to the upstream and relay its answer: streamed chunk by chunk with its status and headers,
    or whole. Once the answer is complete, `after(text)` gets the assistant's text and the turn's
    trace gets the upstream generation (model, usage) and is closed — before the reply ends (after the
    last streamed chunk, before the response is complete), since on Lambda nothing runs after it."""
    trace = trace or TurnTrace()
    generation = trace.generation(model) if api else None

    def finish(status: int, usage: dict | None, text: str) -> None:
        try:
            _finish(status, usage, text)
        except Exception:  # the reply has gone out; nothing here may fail the turn
            log.exception("post-turn work failed")

    def _finish(status: int, usage: dict | None, text: str) -> None:
        if generation is not None:
            generation.update(
                usage_details=TurnTrace.usage(api or "", usage),
                output=text[:2000] or None,
                level="DEFAULT" if status < 400 else "ERROR",
            )
            generation.end()
        if after and status == 200 and text:
            after(text)
        if generation is not None:
            trace.end()
            proxy.telemetry.flush()

    url = upstream.url(path)
    if request.url.query:
        url = f"{url}?{request.url.query}"
    outgoing = proxy.client.build_request(
        request.method, url, headers=_outgoing_headers(request, proxy, upstream), content=content
    )
    started = time.perf_counter()
    try:
        response = await proxy.client.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        proxy.counters.record("upstream", (time.perf_counter() - started) * 1000, ok=False)
        await run_in_threadpool(finish, 502, None, "")
        return _error(
            502, "upstream_unavailable", f"upstream {upstream.name!r} did not answer: {type(exc).__name__}"
        )
    headers = {k: v for k, v in response.headers.items() if k.lower() not in _DROP_RESPONSE}
    streaming = "text/event-stream" in response.headers.get("content-type", "")
    if not streaming:
        data = await response.aread()
        await response.aclose()
        proxy.counters.record("upstream", (time.perf_counter() - started) * 1000, response.status_code < 500)
        text, usage = "", None
        if api and response.status_code == 200:
            with contextlib.suppress(ValueError, AttributeError):
                parsed = json.loads(data)
                text, usage = wire.reply_text(api, parsed), parsed.get("usage")
        # Before the reply, not after it: behind the Lambda Web Adapter the sandbox freezes once the
        # response has gone, so the extraction job must be on the queue first (a few ms).
        await run_in_threadpool(finish, response.status_code, usage, text)
        return Response(data, status_code=response.status_code, headers=headers)

    capture = wire.StreamCapture(api) if api else None

    async def chunks():
        finished = False
        try:
            # decoded: httpx asked for gzip itself, and content-encoding is not relayed
            async for chunk in response.aiter_bytes():
                if capture:
                    capture.feed(chunk)
                    if capture.finished and not finished:
                        # SDKs stop reading at the end event: queue the post-turn work before they see it
                        finished = True
                        await run_in_threadpool(finish, response.status_code, capture.usage, capture.text)
                yield chunk
        finally:
            # a client that hangs up right after the last event cancels this generator: the post-turn
            # work (extraction, the trace) must run anyway
            with anyio.CancelScope(shield=True):
                await response.aclose()
                proxy.counters.record(
                    "upstream", (time.perf_counter() - started) * 1000, response.status_code < 500
                )
                if not finished:
                    await run_in_threadpool(
                        finish,
                        response.status_code,
                        capture.usage if capture else None,
                        capture.text if capture else "",
                    )

    return StreamingResponse(chunks(), status_code=response.status_code, headers=headers)
