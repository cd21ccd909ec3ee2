"""A chat turn through the proxy, as a pipeline: resolve (the upstream and the caller's key) → read (the
body) → classify (a side call, a /memory command, or a turn of a chat) → context (the chat's project, the
date, the recalled memories placed at the user's message) → relay (the extraction queued once the answer is
complete). Each step is a function of this module; `chat_turn` runs them in order."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ..config.proxy import ProxySettings
from ..errors import EngramError
from ..jobs import ExtractJob
from ..text import scrub
from . import librechat, wire
from .memory import Turn, datetime_block, explicit_fact, is_command
from .projects import ChatFacts
from .relay import After, Door, Reading, error, open_door, relay, speak, timed
from .telemetry import TurnTrace

if TYPE_CHECKING:  # the wiring's type: the process's parts are handed in, never looked up here
    from .runtime import Proxy

log = logging.getLogger(__name__)
# On a turn that went on without its memory: why ("over-budget": it took too long; "paused": a turn just
# before took too long, and memory gets a rest: engram.breaker)
MEMORY_HEADER = "x-engram-memory"

CHAT_PATHS: dict[wire.Api, str] = {"openai": "v1/chat/completions", "anthropic": "v1/messages"}


@dataclass(frozen=True)
class Said:
    """What a chat request says, read once: who and where (LibreChat's headers), the body with the
    commands of earlier turns taken out, and the turn's own words (no prepended file, no tool result)."""

    user: str | None
    author: (
        dict[str, str] | None
    )  # the user's LibreChat names, as their facts keep them (librechat.author_content)
    conversation: str | None
    parent: str | None  # the message this turn answers ({{LIBRECHAT_BODY_PARENTMESSAGEID}}), if sent
    model: str
    body: dict[str, Any]
    inherited: bool | None  # the memory setting the chat's history set (a fork carries it)
    index: int  # where the turn's user message is in `body["messages"]`
    said: str
    last: str  # the turn's words as engram reads them (queries, extraction); the upstream gets `body`
    tool_round: bool
    command: bool  # a /memory command (never in a tool round): engram answers it, no model is called

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


def parse_chat_body(raw: bytes) -> dict[str, Any] | None:
    """The request body when it is a JSON object with a `messages` list, else None."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) and isinstance(body.get("messages"), list) else None


def malformed(body: dict[str, Any]) -> str | None:
    """What a chat body gets wrong that engram reads (each message an object, its text parts' `text` a
    string, `stream_options` an object), or None."""
    wrong = next((w for n, m in enumerate(body["messages"]) if (w := _malformed_message(n, m))), None)
    if wrong is None and not isinstance(body.get("stream_options"), dict | None):
        return "`stream_options` must be an object"
    return wrong


def _malformed_message(number: int, message: Any) -> str | None:
    if not isinstance(message, dict):
        return f"messages[{number}] must be an object"
    content = message.get("content")
    parts = [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []
    if any(p.get("type") in ("text", "input_text") and not isinstance(p.get("text"), str) for p in parts):
        return f"messages[{number}]: a text part's `text` must be a string"
    return None


def unresolved_identity(s: ProxySettings, request: Request, api: wire.Api) -> Response | None:
    """A refusal for identity headers LibreChat sent empty or with its placeholder unresolved: taken as an
    identity, every user of such an install would share one memory."""
    for header, placeholder in (
        (s.user_header, "{{LIBRECHAT_USER_ID}}"),
        (s.conversation_header, "{{LIBRECHAT_BODY_CONVERSATIONID}}"),
    ):
        value = request.headers.get(header)
        if value is not None and (not value.strip() or librechat.unresolved(value)):
            return error(
                400,
                "invalid_identity",
                f"the {header} header is {value!r}: LibreChat sent it empty or with its placeholder "
                f"unresolved. Set it under the endpoint's headers in librechat.yaml as {placeholder!r}, "
                "on a LibreChat version that fills it in for every request (title calls of some versions "
                "did not: LibreChat issues #8931, #14580); engram stores nothing under it.",
                api,
            )
    return None


def read_turn(s: ProxySettings, request: Request, body: dict[str, Any]) -> Said:
    """Classify's input: the identity headers and the turn's words."""
    stripped = librechat.without_commands(body, s.command_prefix, is_command)
    index, said = librechat.user_turn(stripped)
    last, tool_round = scrub(said), librechat.in_tool_round(stripped)
    return Said(
        user=request.headers.get(s.user_header) or None,
        author=librechat.author_content(
            request.headers.get(s.user_name_header), request.headers.get(s.username_header)
        ),
        conversation=request.headers.get(s.conversation_header) or None,
        parent=_parent(request.headers.get(s.parent_message_header)),
        model=scrub(str(body.get("model") or "")),
        body=stripped,
        inherited=librechat.setting_in_history(body, s.command_prefix, is_command),
        index=index,
        said=said,
        last=last,
        tool_round=tool_round,
        command=not tool_round and is_command(last, s.command_prefix),
    )


def _parent(value: str | None) -> str | None:
    """The parent message id LibreChat filled in (never its placeholder, never a runaway value)."""
    if not value or librechat.unresolved(value) or len(value) > 200:
        return None
    return value


PASS = "pass"  # relayed untouched: not a turn engram reads


def classify(door: Door, request: Request, api: wire.Api, raw: bytes) -> Said | Response | str:
    """A chat call as one of: PASS (another wire format on this route, or a side call of LibreChat's: a
    title, a summary), a refusal (no messages, an unresolved identity header), or what its turn says."""
    if door.upstream.api != api:  # an OpenAI route on an Anthropic upstream (or back): not ours to reshape
        return PASS
    body = parse_chat_body(raw)
    if body is None:
        return error(400, "invalid", "the request body must be a JSON object with a `messages` list", api)
    wrong = malformed(body)
    if wrong is not None:
        return error(400, "invalid", f"the request body is malformed: {wrong}", api)
    s = door.proxy.settings
    refused = unresolved_identity(s, request, api) if door.authorized else None
    if refused is not None:
        return refused
    kind = librechat.side_call(body, s.side_call_markers)
    if kind is not None:  # LibreChat asking about the chat (a title, a summary), not the user speaking
        log.info("a LibreChat side call (%s) passed through untouched", kind)
        return PASS
    return read_turn(s, request, body)


async def chat_turn(proxy: Proxy, name: str, request: Request, api: wire.Api) -> Response:
    """One OpenAI or Anthropic chat call: passed through untouched where it is not a turn of a LibreChat
    chat (another wire format, a side call, no conversation id), answered by engram where it is a /memory
    command, else relayed with the date and the recalled memories and its extraction queued after."""
    door = open_door(proxy, name, request, api)
    if not isinstance(door, Door):
        return door
    raw = await request.body()
    said = classify(door, request, api, raw)
    if isinstance(said, Response):
        return said
    if not isinstance(said, Said):
        return await relay(door, request, CHAT_PATHS[api], raw)
    command = said.command
    if command and not said.conversation:  # answered, never sent to the model, even without the headers
        turn = Turn(
            user=said.user, conversation=None, project=None, authorized=door.authorized, author=said.author
        )
        return await answer_command(door, api, said, turn)
    # /memory commands never call a model, so they are never traced
    trace = (
        TurnTrace()
        if command
        else proxy.telemetry.turn(
            conversation=said.conversation, user=said.user, upstream=door.upstream.name, model=said.model
        )
    )
    if not said.conversation:  # not a LibreChat chat (no conversation id): untouched
        return await relay(door, request, CHAT_PATHS[api], raw, Reading(api, None, trace, said.model))
    return await chat_in_context(door, request, api, said, trace)


async def answer_command(door: Door, api: wire.Api, said: Said, turn: Turn) -> Response:
    """A /memory command, answered by engram in the caller's wire format."""
    answer = await run_in_threadpool(door.proxy.memory.command, turn, said.said)
    return speak(api, said.model, answer or "", said.stream, said.body)


async def chat_facts(proxy: Proxy, said: Said, trace: TurnTrace) -> ChatFacts:
    """The chat's project and LibreChat's own settings for it; memory's context failing never fails the
    turn."""
    user, conversation = said.user, said.conversation
    if not conversation:  # not a chat of LibreChat's: nothing to resolve
        return ChatFacts()
    try:
        with trace.span("resolve-context"):
            return await timed(
                proxy, "project", lambda: proxy.projects.chat(user, conversation) if user else ChatFacts()
            )
    except Exception:  # with LibreChat's MongoDB configured, its opt-outs are unknown: memory off (closed)
        log.exception("project lookup failed; answering without a project")
        return ChatFacts(unknown=proxy.projects.db is not None)


async def resolve_turn(door: Door, said: Said, trace: TurnTrace) -> tuple[Turn, ChatFacts]:
    """Who and where the turn is (its chat's project and LibreChat's settings for it); a fork's chat takes
    the memory setting its history set."""
    proxy = door.proxy
    chat = await chat_facts(proxy, said, trace)
    turn = Turn(
        user=said.user,
        conversation=said.conversation,
        project=chat.project,
        authorized=door.authorized,
        project_name=chat.project_name,
        author=said.author,
    )
    if said.inherited is not None and door.authorized:
        await run_in_threadpool(proxy.memory.inherit, turn, said.inherited)
    return turn, chat


async def chat_in_context(
    door: Door, request: Request, api: wire.Api, said: Said, trace: TurnTrace
) -> Response:
    """A turn of a LibreChat chat: its context resolved, then a command answered or the turn relayed with
    the date and the memories it recalls."""
    proxy = door.proxy
    started = time.perf_counter()
    turn, chat = await resolve_turn(door, said, trace)
    project_ms = (time.perf_counter() - started) * 1000
    if said.command:
        return await answer_command(door, api, said, turn)
    keep, block, skipped = await memory_for_turn(proxy, turn, said, chat, trace)
    _note_if_slow(proxy, said, started, project_ms)
    out = outgoing_body(door, api, said, block)
    after = extraction_after(door, turn, said, trace, chat) if keep else None
    told = {MEMORY_HEADER: f"skipped; reason={skipped}"} if skipped else {}
    reading = Reading(api, after, trace, said.model, told)
    return await relay(door, request, CHAT_PATHS[api], json.dumps(out).encode(), reading)


async def memory_for_turn(
    proxy: Proxy, turn: Turn, said: Said, chat: ChatFacts, trace: TurnTrace
) -> tuple[bool, str, str | None]:
    """(whether to keep what this turn says, the block to place at its user message, why its recall was
    skipped when it was: engram.breaker)."""
    # LibreChat's own opt-outs: personalization memories off means no memory at all; a temporary chat is
    # deleted by LibreChat, so nothing is kept from it (what is remembered may still be recalled). A
    # regenerate is extracted once by the worker (ExtractJob.turn_key).
    turn_key = (said.conversation, hashlib.sha256(said.said.encode("utf-8", "surrogatepass")).hexdigest())
    memory_on, block, skipped = await turn_block(proxy, turn, said, turn_key, trace, chat)
    return memory_on and not chat.temporary, block, skipped


def history_key(said: Said) -> str:
    """The chat and its history up to the turn's words, hashed (no words kept): a regenerate sends the
    same again, the same words later in the chat follow another history."""
    messages = (said.body.get("messages") or [])[: said.index + 1]
    shown = json.dumps([said.conversation, messages], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(shown.encode("utf-8", "surrogatepass")).hexdigest()


def outgoing_body(door: Door, api: wire.Api, said: Said, block: str) -> dict[str, Any]:
    """The body sent upstream: the turn's block placed at its user message; an OpenAI stream asks for its
    usage where the upstream is told to (the trace's token counts)."""
    upstream = door.upstream
    out = (
        librechat.place_block(api, said.body, said.index, block, upstream.memoryPlacement)
        if block
        else dict(said.body)
    )
    # only where LibreChat asked for stream options: an operator who dropped them (dropParams) has an
    # upstream that refuses them
    if said.stream and api == "openai" and upstream.forceIncludeUsage and "stream_options" in said.body:
        out["stream_options"] = {**(said.body.get("stream_options") or {}), "include_usage": True}
    return out


def _note_if_slow(proxy: Proxy, said: Said, started: float, project_ms: float) -> None:
    spent = (time.perf_counter() - started) * 1000
    if spent > proxy.settings.slow_call_ms:
        phases = {"project": round(project_ms, 1), "settingsAndRecall": round(spent - project_ms, 1)}
        log.warning(
            "memory added %d ms to a chat turn before the model was called: %s (slowest phase: %s)",
            spent,
            json.dumps(phases),
            max(phases, key=lambda phase: phases[phase]),
            extra={"phases": phases, "conversation": said.conversation},
        )


def extraction_after(door: Door, turn: Turn, said: Said, trace: TurnTrace, chat: ChatFacts) -> After | None:
    """What queues the turn's extraction once the answer is complete, or None when the write mode keeps
    nothing of this turn."""
    s, last = door.proxy.settings, said.last
    if s.write_mode == "off" or not last:
        return None
    mode = "explicit" if s.write_mode == "explicit" else "llm"
    if mode != "llm" and not explicit_fact(last):
        return None

    def after(text: str) -> None:
        if not text.strip():  # tool calls only: the answer comes after the tool rounds
            return
        with trace.span("memory-write", mode=mode):
            exchange = Exchange(door.upstream.name, said.model, mode, last, text, history_key(said))
            queue_extraction(door.proxy, turn, exchange, said.parent, chat.unknown)

    return after


async def turn_block(
    proxy: Proxy,
    turn: Turn,
    said: Said,
    key: tuple[str | None, str],
    trace: TurnTrace,
    chat: ChatFacts,
) -> tuple[bool, str, str | None]:
    """(memory on for this chat, the block to place at the turn's user message: the date and the recalled
    memories, why the recall was skipped if it was). A tool round tells the time its turn started (and its
    recall is the cached one within the recall cache's TTL), so the block stays the same byte for byte
    across the rounds of one turn. A chat whose LibreChat settings could not be read recalls nothing (they
    may say memory off); what it says is kept only once the worker has read them. Memory has a budget
    (engram.breaker): past it the turn goes on without."""
    s = proxy.settings
    if not said.tool_round or key not in proxy.turn_started:
        proxy.turn_started[key] = datetime_block()
    blocks = [proxy.turn_started[key]] if s.datetime_enabled else []
    started = time.monotonic()
    memory = _TurnMemory()
    try:
        await asyncio.wait_for(memory.read(proxy, turn, said, chat, trace), s.memory_budget_ms / 1000)
    except TimeoutError:
        memory.skipped = "over-budget"
        if memory.recalling:
            proxy.memory_breaker.failed()
        log.warning("memory took over %d ms: this turn goes on without it", s.memory_budget_ms)
    except EngramError as exc:  # memory failing never fails the turn
        log.warning("memory unavailable, answering without it: %s", exc.message)
    except Exception:
        log.exception("memory failed, answering without it")
    if memory.skipped:
        proxy.counters.record("memorySkipped", (time.monotonic() - started) * 1000, ok=False)
    return memory.on, "\n\n".join(blocks + memory.blocks), memory.skipped


@dataclass
class _TurnMemory:
    """What a turn's memory came to within its budget: on or not, what it recalled, why it was skipped."""

    on: bool = False
    blocks: list[str] = field(default_factory=list)
    skipped: str | None = None
    recalling: bool = False  # the recall was under way (when the budget ran out: it, not the settings)

    async def read(self, proxy: Proxy, turn: Turn, said: Said, chat: ChatFacts, trace: TurnTrace) -> None:
        self.on = await _memory_on(proxy, turn, chat.memories_off)
        if not (self.on and proxy.settings.recall_enabled and not chat.unknown):
            return
        if not proxy.memory_breaker.allows():
            self.skipped = "paused"
            return
        self.recalling = True
        self.blocks = await _recalled(proxy, turn, said.body, trace)
        proxy.memory_breaker.succeeded()


async def _memory_on(proxy: Proxy, turn: Turn, memories_off: bool) -> bool:
    """Whether engram's memory is on for this chat: the caller showed engram's key, a user is named,
    LibreChat's own memories are not off, and the user's settings for the chat say on."""
    if not (turn.authorized and turn.user) or memories_off:
        return False
    enabled, _ = await run_in_threadpool(proxy.memory.enabled, turn)
    return enabled


async def _recalled(proxy: Proxy, turn: Turn, body: dict[str, Any], trace: TurnTrace) -> list[str]:
    """The memories block recalled for the chat's latest user turns ([] when there is none)."""
    s = proxy.settings
    turns = [librechat.own_text(t) for t in wire.user_turns(body)]
    query = scrub("\n".join([t for t in turns if t][-s.query_message_count :]))
    if not query.strip() and s.recall_mode == "relevant":
        return []
    with trace.span("recall", mode=s.recall_mode) as span:
        block, found = await timed(proxy, "recall", lambda: proxy.memory.context(turn, query))
        span.update(metadata={"results": found})
    return [block] if block else []


@dataclass(frozen=True)
class Exchange:
    """A finished turn to extract from: where it was answered, how to extract, the words, its history."""

    upstream: str
    model: str
    mode: str
    user_text: str
    assistant_text: str
    history: str  # history_key: a regenerate of it is extracted once


def queue_extraction(
    proxy: Proxy, turn: Turn, exchange: Exchange, parent: str | None = None, unconfirmed: bool = False
) -> None:
    """Hand the exchange to the worker; a queue failure costs the memory, never the reply."""
    try:
        job = ExtractJob(
            bot=proxy.settings.bot,
            user=turn.user,
            conversation=turn.conversation,
            project=turn.project,
            upstream=exchange.upstream,
            model=exchange.model or None,
            mode=exchange.mode,
            user_text=exchange.user_text[:20_000],
            assistant_text=exchange.assistant_text[:20_000],
            queued_at=turn.received_at,  # a forget that landed while the answer streamed wins
            turn_key=exchange.history,
            parent_message=parent,
            unconfirmed=unconfirmed,
            author=turn.author,
        )
        proxy.engine.queue.send(job)
    except Exception:
        log.exception("could not queue memory extraction")
