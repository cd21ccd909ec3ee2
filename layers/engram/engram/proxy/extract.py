"""Post-turn extraction: ask a model for durable facts as JSON, tolerate what small models send back,
drop secrets and what is already known, and store the rest. Runs in the worker, never in the reply."""

from __future__ import annotations

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
from ..errors import Forgotten
from ..jobs import ExtractJob, JobQueue
from ..ports import StatePort
from ..service import MemoryService
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
Answer with only a JSON object: {{"memories": ["fact", ...]}} (an empty list when nothing is worth
keeping)."""

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


def parse_memories(text: str) -> list[str] | None:
    """The facts in a model's answer: JSON in fences or prose, repaired when malformed; None if hopeless."""
    if not isinstance(text, str):
        return None
    body = re.sub(r"```(?:json)?", "", text)
    for candidate in _spans(body, "{}") + _spans(body, "[]"):
        for attempt in (candidate, _repair(candidate)):
            items = _memories_in(attempt)
            if items is not None:
                return [i.strip() for i in items if isinstance(i, str) and i.strip()]
    return None


def _spans(body: str, brackets: str) -> list[str]:
    """The text from the first opening bracket to the last closing one ([] when there is none)."""
    start, end = body.find(brackets[0]), body.rfind(brackets[1])
    return [body[start : end + 1]] if start != -1 and end > start else []


def _memories_in(attempt: str) -> list[Any] | None:
    """The list a JSON text holds: itself, or its `memories` (None: not JSON, or no list)."""
    try:
        value = json.loads(attempt)
    except ValueError:
        return None
    items = value.get("memories") if isinstance(value, dict) else value
    return items if isinstance(items, list) else None


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
        if job.mode == "explicit":
            fact = explicit_fact(job.user_text)
            candidates = [fact] if fact else []
        else:
            candidates = self._ask(job)
        if self.service.refused(job.bot, {job.user}, job.queued_at):
            log.info("extraction dropped: its user was forgotten after the turn")
            return []
        return self._store(
            job, [f for f in candidates[: self.settings.max_per_turn] if self._new(job, f)], where
        )

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
                )
            except Forgotten:
                log.info("extraction dropped: its user was forgotten while it ran")
                return stored
            if created:
                stored.append(fact)
        return stored

    def _known(self, job: ExtractJob, fact: str) -> bool:
        scope = Scope(bot=job.bot, kind="fact", user=job.user)
        similar = self.service.similar(scope, fact)
        return similar is not None and similar[1] >= self.settings.dedupe_threshold

    def _ask(self, job: ExtractJob) -> list[str]:
        exchange = f"User: {job.user_text}\n\nAssistant: {job.assistant_text}"
        system = PROMPT.format(n=self.settings.max_per_turn)
        answer = self._complete(job, system, exchange)
        if answer is None:
            return []
        facts = parse_memories(answer)
        if facts is None:  # one more try, asking for nothing but the JSON
            answer = self._complete(
                job, system, exchange + '\n\nReply with only the JSON object {"memories": [...]}.'
            )
            facts = parse_memories(answer or "")
        if facts is None:
            # never the answer itself: it quotes what the user said (README: no log line carries memory text)
            log.warning(
                "extraction dropped: the model's answer was not JSON even after a retry (%d chars)",
                len(answer or ""),
            )
            return []
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
