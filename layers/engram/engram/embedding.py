"""Embedder settings (stored in DynamoDB), switching models behind live traffic, re-embedding in
resumable pages through SQS, and the progress counts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from .bookkeeping import EmbeddingSettings
from .clock import now_ms
from .config import Settings
from .embedders import Embedder, NoEmbedder, own_vector_name, vector_name
from .errors import EmbedderUnavailable, InvalidInput
from .follow_on import queue_once
from .jobs import JobQueue, ReembedJob
from .line_spans import LineReader
from .record import Paging
from .service import MemoryService
from .store import READ_SHARDS, Record, StepBudget
from .text import check_json
from .vectors import Scope

if TYPE_CHECKING:
    from .config.proxy import Upstream

log = logging.getLogger(__name__)
PAGE = 500
# A re-embed job gives pages their vectors while another fits in this, then queues the rest of its chain:
# well inside the worker's 180 s. Shorter than a rebuild's 40 s step, as a page is longer (a model's embeds,
# and each vector mixed into the points around it): at 50,000 records one page took up to ~17 s here.
STEP_S = 30.0
# A page that failed (the index or the embedder down) is tried again a minute later this many times at
# most: ~16 hours of outage before the step fails for good (to SQS's back-off and its dead letters)
MAX_ATTEMPTS = 1000
# Where a chain starts (no memory id above it): memory ids are below 2**63
CHAIN_TOP = 2**63


@dataclass
class Providers:
    """The embedders that can be named: the local model, Ollama, and UPSTREAMS entries."""

    settings: Settings
    upstreams: dict[str, Any]  # name -> (baseUrl, apiKey)
    transport: httpx.BaseTransport | None = None

    def build(self, chosen: EmbeddingSettings) -> Embedder | NoEmbedder:
        """The embedder chosen settings describe, or InvalidInput saying what is missing."""
        if chosen.embedder == "off":
            return NoEmbedder()
        if chosen.embedder == "local":
            from .embedders import local_embedder

            return local_embedder(
                chosen.embeddingModel or self.settings.local_model, self.settings.torch_threads
            )
        if not chosen.embeddingProvider or not chosen.embeddingModel:
            raise InvalidInput("remote needs an embeddingProvider and an embeddingModel")
        if chosen.embeddingProvider == "ollama":
            from .embedders.http import OllamaEmbedder

            return OllamaEmbedder(
                self.settings.ollama_url,
                chosen.embeddingModel,
                self.settings.embed_timeout_s,
                transport=self.transport,
                bulk_url=self.settings.ollama_bulk_url,
            )
        if chosen.embeddingProvider not in self.upstreams:
            raise InvalidInput(
                f"no provider named {chosen.embeddingProvider!r} "
                f"(ollama, or an UPSTREAMS name: {', '.join(sorted(self.upstreams)) or 'none'})"
            )
        from .embedders.http import OpenAIEmbedder

        base, key = self.upstreams[chosen.embeddingProvider]
        return OpenAIEmbedder(
            base,
            chosen.embeddingModel,
            api_key=key,
            timeout_s=self.settings.embed_timeout_s,
            transport=self.transport,
            provider=chosen.embeddingProvider,
        )


def _explain(exc: EmbedderUnavailable, chosen: EmbeddingSettings) -> str:
    text = exc.message
    refused = " 404" in text or " 405" in text or "answered 404" in text or "answered 405" in text
    if refused and chosen.embeddingProvider != "ollama":
        return f"that provider serves no embeddings ({text})"
    if "no local embedder" in text:
        return text
    return f"the embedding model didn't answer: {text}"


class EmbeddingManager:
    """The current embedder for every process, cached for 30 s; changes re-embed in the background."""

    def __init__(
        self,
        service: MemoryService,
        queue: JobQueue,
        providers: Providers,
        defaults: EmbeddingSettings,
        ttl_s: float = 30.0,
        retry_delay_s: int = 60,
    ):
        self.service, self.queue, self.providers, self.defaults, self.ttl_s = (
            service,
            queue,
            providers,
            defaults,
            ttl_s,
        )
        self.retry_delay_s = retry_delay_s
        self._loaded_at = 0.0
        self._current: EmbeddingSettings = defaults  # what the service's embedder was built from
        self._lock = threading.Lock()

    # ----- settings --------------------------------------------------------------------------------

    def current(self) -> EmbeddingSettings:
        """The stored settings (defaults until someone changes them), refreshed every ttl_s."""
        with self._lock:
            if not self._loaded_at or time.monotonic() - self._loaded_at > self.ttl_s:
                stored = self.service.state.embedder_settings.get() or self.defaults
                if stored != self._current:
                    self._apply(stored)
                self._current, self._loaded_at = stored, time.monotonic()
            return self._current

    def _apply(self, chosen: EmbeddingSettings, embedder: Embedder | NoEmbedder | None = None) -> None:
        embedder = embedder or self.providers.build(chosen)
        self.service.indexer.use(embedder, chosen.messageVectors)

    def change(self, patch: dict[str, Any]) -> EmbeddingSettings:
        """Apply a PATCH: only what it names changes; a new model must embed a test string first."""
        check_json("settings", patch)
        allowed = set(EmbeddingSettings.model_fields)
        unknown = set(patch) - allowed
        if unknown:
            raise InvalidInput(f"unknown settings: {', '.join(sorted(unknown))}")
        old = self.current()
        merged = old.model_dump()
        merged.update(patch)
        if patch.get("embedder") in ("local", "off"):
            merged.update({k: patch.get(k) for k in ("embeddingProvider", "embeddingModel")})
        try:
            chosen = EmbeddingSettings(**merged)
        except ValidationError as exc:
            raise InvalidInput(
                "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            ) from exc
        embedder = self.providers.build(chosen)
        model_changes = (
            vector_name(getattr(embedder, "provider", "off"), getattr(embedder, "model", ""))
            != self.service.dense_name
        )
        if not isinstance(embedder, NoEmbedder) and (model_changes or chosen.embedder != old.embedder):
            try:
                vectors = embedder.embed(["engram embedding test"])
                if not vectors or not vectors[0]:
                    raise EmbedderUnavailable("it answered with no vector")
            except EmbedderUnavailable as exc:
                raise InvalidInput(_explain(exc, chosen)) from exc
        self.service.state.embedder_settings.save(chosen)
        with self._lock:
            self._apply(chosen, embedder)
            self._current, self._loaded_at = chosen, time.monotonic()
        name = self.service.dense_name
        if name is not None and model_changes:
            self.queue.send(ReembedJob(vector=name, planned=now_ms()))
        return chosen

    # ----- progress --------------------------------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        """Counts from the index (exact counts on indexed payload fields, no scans of the records)."""
        self.current()
        name = self.service.dense_name
        index = self.service.index
        healthy = name is not None and self._answers()

        def count(kind: str, dense: str | None = None) -> int:
            return index.count(Scope(bot=None, kind=kind), dense=dense)

        has_vectors = name is not None and name in index.dense_names()
        return {
            "model": getattr(self.service.embedder, "model", None) if healthy else None,
            "memories": count("fact"),
            "memoriesWithVectors": count("fact", name) if has_vectors else 0,
            "messages": count("message"),
            "withVectors": count("message", name) if has_vectors else 0,
            "error": self.service.last_error,
            # the second pass: points are searched by their own meaning until it has mixed them
            "mixing": name is not None
            and has_vectors
            and self.service.state.reembeds.left(_run_of(name, "mix")) > 0,
        }

    def _answers(self) -> bool:
        try:
            self.service.embedder.embed(["ping"])
            return True
        except EmbedderUnavailable as exc:
            self.service.indexer.failed(exc.message)
            return False

    # ----- re-embedding ----------------------------------------------------------------------------

    def reembed(self, job: ReembedJob) -> None:
        """The plan (no bot): a chain per bot and kind, queued at once; or one step of a chain: pages of
        the newest records, each given this model's own vector (step "vectors") or, mixing on, its
        searched meaning mixed from its window's (step "mix", planned once every first-pass chain has
        ended), while another page fits in STEP_S; then the next step is queued from where it stopped (the
        pages share their line reads)."""
        self.current()
        if self.service.dense_name != job.vector:
            log.info("re-embed for %s stopped: the model changed again", job.vector)
            return
        if job.bot is None:
            self._plan_once(job)
            return
        budget, reads = StepBudget(STEP_S), self.service.records.line_reads()
        # the mix pass reads a page ahead: a page's windows lie mostly in the pages either side of it, so
        # each record is read once in a step, not again for its neighbours' windows
        ahead = job.step == "mix"
        before: list[Record] = []
        page = self._page(job, job.after_id)
        while True:
            budget.begin_page()
            following = self._page(job, int(page[-1].id)) if ahead and len(page) == PAGE else []
            if page and not self._give_vectors(job, page, reads, beside=before + following):
                return
            if len(page) < PAGE:
                break
            job = job.model_copy(update={"after_id": int(page[-1].id), "attempt": 0})
            if not budget.another_fits():
                self._queue_next(job)
                return
            before, page = page, following if ahead else self._page(job, job.after_id)
        chain = f"{job.bot}#{job.phase}" + ("" if job.shard is None else f"#{job.shard}")
        run, state = _run_of(job.vector, job.step), self.service.state
        ended = state.reembeds.end_chain(run, chain)
        if ended is None or ended.left != 0 or ended.followed:
            return
        # the pass is over: what follows is done by its last chain, or by that chain's redelivery when its
        # first delivery was cut off here (an outbox: the mark comes after, so it may be done twice, never
        # not at all)
        if job.step == "vectors" and self.service.indexer.mixing:
            self._plan(job.vector, "mix")
        else:
            self._finish(job.vector)
        state.reembeds.mark_followed(run)

    def _queue_next(self, job: ReembedJob, delay_s: int = 0) -> None:
        """A chain's next step (or a page tried again), queued once however often this step is delivered
        (engram.follow_on)."""
        assert job.bot is not None
        run = _run_of(job.vector, job.step)
        chain = f"reembed#{run}#{job.bot}#{job.phase}#{job.shard}#{job.planned}"
        queue_once(
            self.service.state.follow_ons,
            chain,
            _position(job),
            lambda: self.queue.send(job, delay_s=delay_s),
        )

    def _page(self, job: ReembedJob, after_id: int | None) -> list[Record]:
        """The chain's next page, newest first, below `after_id`."""
        assert job.bot is not None  # a chain's step, not the plan
        return self.service.records.page(job.bot, job.phase, Paging(after_id, PAGE, shard=job.shard))

    def _give_vectors(
        self, job: ReembedJob, page: list[Record], reads: LineReader, beside: list[Record]
    ) -> bool:
        """One page of a chain given the model's vectors (or mixed: `beside` are the pages either side);
        False when it could not be (the index or the embedder down): the page is queued again, to be tried
        in a while."""
        indexer = self.service.indexer
        try:
            if job.step == "mix":
                indexer.mix_own(page, reads, beside)
                return True
            done = indexer.add_dense(page, reads)
        except Exception as exc:  # Qdrant down: try this page again in a minute
            indexer.failed(str(exc))
            self._try_again(job)
            return False
        if done < len(page):  # the embedder is down: wait for it, keep our place
            self._try_again(job)
            return False
        return True

    def _try_again(self, job: ReembedJob) -> None:
        """The page that failed, queued again to be tried in a while (once however often this step was
        delivered); past MAX_ATTEMPTS the step fails instead, and SQS backs it off to its dead letters."""
        if job.attempt + 1 >= MAX_ATTEMPTS:
            raise EmbedderUnavailable(f"a re-embed page failed {MAX_ATTEMPTS} times")
        self._queue_next(job.model_copy(update={"attempt": job.attempt + 1}), delay_s=self.retry_delay_s)

    def _plan_once(self, job: ReembedJob) -> None:
        """A plan job planned once however often it is delivered (its duplicate would queue every chain
        again): claimed as its plan's own follow-on, marked sent once the chains are queued. A plan job
        queued before plans carried their time (planned 0) is planned as it comes."""
        run = _run_of(job.vector, job.step)
        if not job.planned:
            self._plan(job.vector, job.step)
            return
        plan = f"reembed#{run}#plan#{job.planned}"
        queue_once(
            self.service.state.follow_ons, plan, 0, lambda: self._plan(job.vector, job.step, job.planned)
        )

    def _plan(self, vector: str, step: str = "vectors", planned: int = 0) -> None:
        """Every bot's facts and messages, a chain of pages per key of each kind (READ_SHARDS), all at once
        (a serial pass over 100 M records took days); the count of chains tells the last one it is the
        last."""
        planned = planned or now_ms()
        chains = [
            ReembedJob(vector=vector, bot=bot, phase=phase, shard=shard, step=step, planned=planned)
            for bot in self.service.records.bots()
            for phase in ("fact", "message")
            for shard in range(READ_SHARDS)
        ]
        if not chains:
            self._finish(vector)
            return
        if step == "vectors":  # an earlier re-embed's second pass for this model, cut off, is not this one's
            self.service.state.reembeds.start(_run_of(vector, "mix"), 0)
        self.service.state.reembeds.start(_run_of(vector, step), len(chains))
        self.queue.send_many(chains)

    def _finish(self, vector: str) -> None:
        """Every record has been through: drop every other model's vectors (the records are untouched)."""
        index = self.service.index
        for name in index.dense_names() - {vector, own_vector_name(vector)}:
            index.delete_dense(name)
            self.service.indexer.dense_dropped(name)
        log.info("re-embed for %s complete; other models' vectors deleted", vector)


def _position(job: ReembedJob) -> int:
    """A chain step's place in its chain (engram.follow_on: positions rise): a chain walks its records
    newest first from `after_id`, so the id is negated; a page tried again is the same place a step on."""
    return -(CHAIN_TOP if job.after_id is None else job.after_id) * MAX_ATTEMPTS + job.attempt


def _run_of(vector: str, step: str) -> str:
    """The name a re-embed's pass counts its chains under (the first pass keeps the vector's own name)."""
    return vector if step == "vectors" else f"{vector}#{step}"


def defaults_from(settings: Settings) -> EmbeddingSettings:
    """The settings the environment starts with (ENGRAM_EMBEDDER and friends)."""
    if settings.embedder == "off":
        return EmbeddingSettings(embedder="off")
    if settings.embedder == "ollama":
        return EmbeddingSettings(
            embedder="remote", embeddingProvider="ollama", embeddingModel=settings.embedding_model
        )
    if settings.embedder == "remote":
        return EmbeddingSettings(
            embedder="remote", embeddingProvider="default", embeddingModel=settings.embedding_model
        )
    return EmbeddingSettings(embedder="local")


def providers_from(
    settings: Settings, upstreams: Sequence[Upstream] = (), transport: httpx.BaseTransport | None = None
) -> Providers:
    """Ollama, the UPSTREAMS entries, and ENGRAM_REMOTE_EMBEDDINGS_URL as `default`."""
    named = {u.name: (u.baseUrl, u.apiKey) for u in upstreams}
    if settings.remote_embeddings_url:
        named.setdefault("default", (settings.remote_embeddings_url, settings.remote_embeddings_key))
    return Providers(settings, named, transport)
