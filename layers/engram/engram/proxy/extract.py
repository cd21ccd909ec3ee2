"""Post-turn extraction: ask a model for durable facts as JSON, tolerate what small models send back,
drop secrets and what is already known, and store the rest. Runs in the worker, never in the reply."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from .. import observability
from ..clock import now_ms
from ..config.proxy import ProxySettings, Upstream
from ..errors import EngramError, Forgotten, InvalidInput, NotFound
from ..jobs import ExtractJob, JobQueue
from ..ports import StatePort
from ..service import Memory, MemoryService
from ..text import format_memory_id, parse_memory_id
from ..vectors import Scope
from .memory import explicit_fact
from .projects import ProjectResolver
from .source import FactSource, LibreChatSource, SourceUnavailable

log = logging.getLogger(__name__)

PROMPT = """You maintain long-term memory about a user from their chats with an assistant.
From the exchange below, extract at most {n} durable facts worth remembering in later chats:
the user's preferences, personal details, circumstances, projects, plans and decisions.
Each fact is one sentence that stands on its own, about "the user" (third person).
Skip small talk, questions, anything only true for this chat, and anything the assistant said
that the user did not confirm. Never include secrets: passwords, API keys, tokens, account or card numbers.
Facts already known about the user may follow the exchange, each with its id. When the exchange changes
one of them, rewrite it as it now stands in "updates" (by its id) instead of adding a new fact; when one no
longer holds at all, put its id in "deletes"; never repeat a known fact in "memories".
Answer with only a JSON object: {{"memories": ["fact", ...], "updates": [{{"id": "mem:1", "text": "fact"}}],
"deletes": ["mem:2"]}} (empty lists when nothing applies)."""
# How many of the user's nearest known facts extraction shows the model, with their ids
KNOWN_SHOWN = 5

_SECRET = re.compile(
    r"(?i)\b(password|passwd|passphrase|api[ _-]?key|secret|access[ _-]?token|private[ _-]?key"
    r"|pin code|ssn)\b"
    r"|\bsk-[A-Za-z0-9_-]{12,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bAKIA[0-9A-Z]{16}\b|-----BEGIN"
    r"|\b(?:\d[ -]?){13,19}\b|\b[A-Za-z0-9+/_-]{32,}\b"
)


# Models that take no sampling parameter but their default: OpenAI's o-series and gpt-5 and later answer
# 400 to `temperature: 0` (LibreChat's own memory agent drops it for them: packages/api/src/agents/memory.ts)
REASONING_MODEL = re.compile(r"(?:^|/)(?:o\d+(?:-|$)|gpt-[5-9])", re.IGNORECASE)


# How long a turn is remembered as extracted: LibreChat's regenerate comes within a chat's session
REGENERATE_WINDOW_S = 7 * 24 * 3600
# A turn whose chat LibreChat had not written yet is looked for again this often, this many times
CONFIRM_DELAY_S = 30
CONFIRM_ATTEMPTS = 6


class ExtractionFailed(Exception):
    """The model could not be asked (network, HTTP error, an answer without text): the reason, in words
    that hold no one's memory."""


def refused_parameter(response: httpx.Response, sent: dict[str, Any]) -> str | None:
    """The sampling parameter a 400 says the model does not take (OpenAI names it in `error.param`;
    OpenAI-compatible servers may only say it in the message), if engram sent it."""
    if response.status_code != 400:
        return None
    try:
        error = response.json().get("error") or {}
    except ValueError:
        return None
    if not isinstance(error, dict):
        return None
    named = error.get("param")
    message = str(error.get("message") or "")
    for parameter in ("temperature",):
        if parameter in sent and (named == parameter or parameter in message):
            return parameter
    return None


def looks_secret(text: str) -> bool:
    """Whether a fact carries something that must never be stored."""
    return bool(_SECRET.search(text))


@dataclass(frozen=True)
class Extracted:
    """What a model's answer asks for: new facts, known facts rewritten ((id, text)), known facts gone."""

    memories: list[str]
    updates: list[tuple[str, str]]
    deletes: list[str]


def parse_memories(text: str) -> list[str] | None:
    """The facts in a model's answer: JSON in fences or prose, repaired when malformed; None if hopeless."""
    extracted = parse_extraction(text)
    return extracted.memories if extracted is not None else None


def parse_extraction(text: str) -> Extracted | None:
    """A model's answer read as {"memories", "updates", "deletes"} (an answer with only memories, or only
    a list, as before): JSON in fences or prose, repaired when malformed; None if hopeless."""
    if not isinstance(text, str):
        return None
    body = re.sub(r"```(?:json)?", "", text)
    for candidate in _spans(body, "{}") + _spans(body, "[]"):
        for attempt in (candidate, _repair(candidate)):
            try:
                value = json.loads(attempt)
            except ValueError:
                continue
            items = value.get("memories") if isinstance(value, dict) else value
            if isinstance(items, list):
                return Extracted(_texts(items), *_changes(value))
    return None


def _texts(items: list[Any]) -> list[str]:
    return [i.strip() for i in items if isinstance(i, str) and i.strip()]


def _changes(value: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """The updates and deletes of an answer's object (none for a bare list, or what is not shaped right)."""
    if not isinstance(value, dict):
        return [], []
    updates = [u for u in map(_update, _listed(value, "updates")) if u is not None]
    return updates, [str(d) for d in _listed(value, "deletes") if isinstance(d, str | int)]


def _listed(value: dict[str, Any], key: str) -> list[Any]:
    items = value.get(key)
    return items if isinstance(items, list) else []


def _update(item: Any) -> tuple[str, str] | None:
    """One update as (id, text), if shaped as one."""
    if not isinstance(item, dict) or not item.get("id") or not isinstance(item.get("text"), str):
        return None
    text = item["text"].strip()
    return (str(item["id"]), text) if text else None


def _spans(body: str, brackets: str) -> list[str]:
    """The text from the first opening bracket to the last closing one ([] when there is none)."""
    start, end = body.find(brackets[0]), body.rfind(brackets[1])
    return [body[start : end + 1]] if start != -1 and end > start else []


def _repair(candidate: str) -> str:
    fixed = (
        candidate.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")
    )
    fixed = _requote(fixed)  # Python-style 'quoting', apostrophes inside kept
    fixed = re.sub(r",\s*([}\]])", r"\1", fixed)  # trailing commas
    fixed = re.sub(r"([{,]\s*)([A-Za-z_]\w*)\s*:", r'\1"\2":', fixed)  # bare keys
    return fixed


def _requote(text: str) -> str:
    """Turn single-quoted strings into JSON strings: a quote opens a string only after [ { , : and
    closes it only before ] } , : so an apostrophe inside (the user's) stays text."""
    out, quote = [], None
    for i, ch in enumerate(text):
        if quote is None:
            quote = _opens(text, i, ch)
            out.append('"' if quote else ch)
        elif ch == quote and _closes(text, i, quote):
            quote = None
            out.append('"')
        else:
            out.append('\\"' if ch == '"' and quote == "'" else ch)
    return "".join(out)


def _opens(text: str, i: int, ch: str) -> str | None:
    """The quote that opens a string at `text[i]`, if one does: a double quote always, a single one after
    [ { , : (or at the start)."""
    if ch == '"' or (ch == "'" and (text[:i].rstrip()[-1:] or "[") in "[{,:"):
        return ch
    return None


def _closes(text: str, i: int, quote: str) -> bool:
    """Whether the quote at `text[i]` closes its string: a double quote always, a single one before
    ] } , : (or at the end)."""
    return quote == '"' or (text[i + 1 :].lstrip()[:1] or "]") in "]},:"


@dataclass(frozen=True)
class ExtractionParts:
    """What extraction works with: the memory service, the state (how extraction goes, which turns were
    extracted), the queue (a turn whose chat is not readable yet comes back later), and LibreChat's
    MongoDB (its chats' settings and the messages facts come from; None when it is not configured)."""

    service: MemoryService
    state: StatePort
    queue: JobQueue
    projects: ProjectResolver | None = None
    source: LibreChatSource | None = None


class _NotYet(Exception):
    """The chat's settings cannot be read yet: the job comes back later."""


class Extractor:
    """Runs extract jobs."""

    def __init__(
        self, settings: ProxySettings, parts: ExtractionParts, transport: httpx.BaseTransport | None = None
    ):
        self.settings = settings
        self.service = parts.service
        self.parts = parts
        self.marks = parts.state.marks  # how extraction goes: /memory status tells the user when it fails
        self.limits = parts.state.limits  # which turns were extracted already (a regenerate: once)
        self.retried_without: dict[str, int] = {}  # refused parameters dropped and asked again, by name
        self._client = httpx.Client(timeout=settings.extract_timeout_ms / 1000, transport=transport)

    def run(self, job: ExtractJob) -> list[str]:
        """Extract and store, once per turn of a chat (LibreChat's regenerate sends the same turn again);
        returns the facts stored."""
        turn = f"turn#{job.turn_key}" if job.turn_key else None
        if turn and self.limits.seen(job.bot, turn):
            log.info("extraction skipped: this turn was extracted already (a regenerate)")
            return []
        try:
            stored = self._run(job)
        except _NotYet:
            self._later(job)
            return []
        # marked once done: a job cut off (kill -9, a timeout) and delivered again is not a regenerate
        if turn:
            self.limits.first_sight(job.bot, turn, int(time.time()) + REGENERATE_WINDOW_S)
        return stored

    def _later(self, job: ExtractJob) -> None:
        """Look for the chat again in a while, a few times; then the turn is not kept (memory off fails
        closed: never stored without LibreChat's word that the chat allows it)."""
        if job.attempt + 1 >= CONFIRM_ATTEMPTS:
            log.info(
                "extraction dropped: the chat's settings could not be read after %d tries", CONFIRM_ATTEMPTS
            )
            return
        self.parts.queue.send(job.model_copy(update={"attempt": job.attempt + 1}), delay_s=CONFIRM_DELAY_S)

    def _where(self, job: ExtractJob) -> FactSource | None:
        """Where the turn was said (its chat and, found in LibreChat's MongoDB, its message), or None when
        its chat does not allow keeping it; _NotYet when that cannot be read yet."""
        projects, source = self.parts.projects, self.parts.source
        if job.unconfirmed and projects is not None:
            chat = projects.chat(job.user, job.conversation)
            if chat.unknown:
                raise _NotYet
            if chat.temporary or chat.memories_off:
                log.info("extraction dropped: LibreChat says the chat keeps no memory")
                return None
        message = None
        if source is not None:
            try:
                message = source.turn_message(job.user, job.conversation, job.parent_message, job.user_text)
            except SourceUnavailable as exc:  # the fact keeps its chat; the message is not known
                log.warning("the turn's message could not be looked up: %s", exc)
        return FactSource(job.conversation, message)

    def _run(self, job: ExtractJob) -> list[str]:
        where = self._where(job)
        if where is None:
            return []
        known: list[Memory] = []
        if job.mode == "explicit":
            fact = explicit_fact(job.user_text)
            extracted = Extracted([fact] if fact else [], [], [])
        else:
            known = self._nearest_known(job)
            extracted = self._ask(job, known)
        if self.service.refused(job.bot, {job.user}, job.queued_at):
            log.info("extraction dropped: its user was forgotten after the turn")
            return []
        self._revise(job, extracted, known)
        candidates = extracted.memories[: self.settings.max_per_turn]
        return self._store(job, [f for f in candidates if self._new(job, f)], where)

    def _nearest_known(self, job: ExtractJob) -> list[Memory]:
        """The user's facts nearest to what they just said: shown to the model with their ids, so a fact
        the turn changes is rewritten rather than joined by a second one."""
        if not job.user_text.strip():
            return []
        scope = Scope(bot=job.bot, kind="fact", user=job.user)
        try:
            return list(self.service.recall(scope, job.user_text[:2000], KNOWN_SHOWN))
        except EngramError as exc:  # the index or the text: extraction goes on without them
            log.warning("the user's known facts could not be read for extraction: %s", exc.message)
            return []

    def _revise(self, job: ExtractJob, extracted: Extracted, known: list[Memory]) -> None:
        """Apply the model's updates and deletes to facts it was shown (any other id is ignored): an update
        keeps the old text as a version, a delete removes the fact as a single delete does."""
        shown = {format_memory_id(m.id): m for m in known}
        for raw, text in extracted.updates:
            memory = shown.get(_memory_id(raw))
            if memory is None or looks_secret(text) or len(text) > 1000 or text == memory.text:
                continue
            with contextlib.suppress(NotFound, InvalidInput):  # gone meanwhile, or no fact at all
                self.service.update(job.bot, memory.id, text, by="extraction")
                log.info("extraction rewrote a fact it was shown")
        for raw in extracted.deletes:
            memory = shown.get(_memory_id(raw))
            if memory is not None:
                with contextlib.suppress(NotFound):
                    self.service.remove(job.bot, memory.id)
                    log.info("extraction removed a fact it was shown")

    def _new(self, job: ExtractJob, fact: str) -> bool:
        """Whether a candidate is worth storing: no secret, not too long, not known already."""
        if looks_secret(fact):
            log.info("extraction dropped a fact that looks like a secret")
            return False
        return len(fact) <= 1000 and not self._known(job, fact)

    def _store(self, job: ExtractJob, facts: list[str], where: FactSource) -> list[str]:
        stored: list[str] = []
        for fact in facts:
            try:  # the check again at the moment of writing: a forget during the model call wins
                _, created = self.service.add_fact(
                    job.bot,
                    fact,
                    user=job.user,
                    project=job.project,
                    saved_by="bot",
                    origin=job.queued_at,
                    source_id=str(where),
                    content=job.author,
                )
            except Forgotten:
                log.info("extraction dropped: its user was forgotten while it ran")
                return stored
            if created:
                stored.append(fact)
        return stored

    def _known(self, job: ExtractJob, fact: str) -> bool:
        scope = Scope(bot=job.bot, kind="fact", user=job.user)
        similar = self.service.similar(scope, fact, job.author)
        return similar is not None and similar[1] >= self.settings.dedupe_threshold

    def _ask(self, job: ExtractJob, known: list[Memory]) -> Extracted:
        exchange = f"User: {job.user_text}\n\nAssistant: {job.assistant_text}"
        if known:
            listed = "\n".join(f"- {format_memory_id(m.id)}: {m.text}" for m in known)
            exchange += f"\n\nKnown facts about the user:\n{listed}"
        system = PROMPT.format(n=self.settings.max_per_turn)
        answer = self._complete(job, system, exchange)
        if answer is None:
            return Extracted([], [], [])
        facts = parse_extraction(answer)
        if facts is None:  # one more try, asking for nothing but the JSON
            answer = self._complete(
                job, system, exchange + '\n\nReply with only the JSON object {"memories": [...]}.'
            )
            facts = parse_extraction(answer or "")
        if facts is None:
            # never the answer itself: it quotes what the user said (README: no log line carries memory text)
            log.warning(
                "extraction dropped: the model's answer was not JSON even after a retry (%d chars)",
                len(answer or ""),
            )
            return Extracted([], [], [])
        return facts

    def _complete(self, job: ExtractJob, system: str, user: str) -> str | None:
        """The model's answer, or None when it could not be asked (noted for /memory status)."""
        try:
            answer = self._ask_model(job, system, user)
        except ExtractionFailed as exc:
            log.warning("extraction call failed: %s", exc)
            self.marks.note_extraction(job.bot, now_ms(), str(exc))
            return None
        if answer is not None:
            self.marks.note_extraction(job.bot, now_ms())
        return answer

    def _model(self, job: ExtractJob) -> Callable[[str, str], str] | None:
        """How to ask the extraction model (system, user) -> answer: the EXTRACT_* model, else the chat's
        own with the key engram holds for its upstream; None when there is neither."""
        s = self.settings
        if s.extract_base_url and s.extract_model:
            base, key, model = s.extract_base_url, s.extract_api_key, s.extract_model
            return lambda system, user: self._openai(base, key, model, system, user)
        upstream = s.upstream(job.upstream) if job.upstream else None
        chat_model = job.model
        if upstream is None or not upstream.apiKey or not chat_model:
            return None
        if upstream.api == "anthropic":
            return lambda system, user: self._anthropic(upstream, chat_model, system, user)
        base, key = upstream.url("v1").rstrip("/"), upstream.apiKey
        return lambda system, user: self._openai(base, key, chat_model, system, user)

    def _ask_model(self, job: ExtractJob, system: str, user: str) -> str | None:
        ask = self._model(job)
        if ask is None:
            # never spend a caller's own credential after the fact: it is not ours to keep
            log.warning("extraction skipped: no EXTRACT_* model and the chat's upstream holds no key of ours")
            return None
        try:
            return ask(system, user)
        except httpx.HTTPStatusError as exc:
            raise ExtractionFailed(f"the model answered HTTP {exc.response.status_code}") from exc
        except httpx.HTTPError as exc:
            raise ExtractionFailed(f"the model could not be reached: {type(exc).__name__}") from exc
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ExtractionFailed(f"the model's answer had no text: {type(exc).__name__}") from exc

    def _openai(self, base: str, key: str | None, model: str, system: str, user: str) -> str:
        base = base.rstrip("/")
        url = f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        if not REASONING_MODEL.search(model):
            body["temperature"] = 0  # the same facts for the same words, where the model takes it
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        r = self._client.post(url, headers=headers, json=body)
        refused = refused_parameter(r, body)
        if refused is not None:  # a model engram did not know refuses it: once more without it
            log.warning("the extraction model refused %r; asked again without it", refused)
            self.retried_without[refused] = self.retried_without.get(refused, 0) + 1
            observability.count("extractionParameterRefused")
            body.pop(refused)
            r = self._client.post(url, headers=headers, json=body)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"] or ""

    def _anthropic(self, upstream: Upstream, model: str, system: str, user: str) -> str:
        r = self._client.post(
            upstream.url("v1/messages"),
            headers={"x-api-key": upstream.apiKey or "", "anthropic-version": "2023-06-01"},
            json={
                "model": model,
                "max_tokens": 1024,
                "system": system,
                "messages": [{"role": "user", "content": user}],
            },
        )
        r.raise_for_status()
        return "".join(b.get("text", "") for b in r.json()["content"] if b.get("type") == "text")


def _memory_id(raw: str) -> str:
    """An id as the model wrote it (mem:12, or 12), as it was shown; '' when it is none."""
    try:
        return format_memory_id(parse_memory_id(raw.strip()))
    except (InvalidInput, ValueError):
        return ""
