"""The proxy's process-wide parts: settings, chat memory, the project resolver and the upstream client."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import httpx
from cachetools import TTLCache

from .. import access_keys
from ..bookkeeping import UserKey
from ..breaker import Breaker
from ..config import get_proxy_settings
from ..config import get_settings as engine_settings
from ..config.proxy import ProxySettings
from ..engine import get_engine
from ..engine_parts import Engine
from ..jobs import LibreChatReconcileJob
from ..keys import key_matches
from ..singleton import ProcessSingleton
from .cache import StatsCache
from .memory import ChatMemory
from .projects import ProjectResolver
from .source import LibreChatSource
from .telemetry import Telemetry

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .extract import Extractor


@dataclass
class Counters:
    """Call counters and slowest times for /healthz."""

    calls: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    max_ms: dict[str, float] = field(default_factory=dict)

    def record(self, phase: str, ms: float, ok: bool = True) -> None:
        """Count one call of a phase (project, recall, upstream); on Lambda also a CloudWatch metric."""
        self.calls[phase] = self.calls.get(phase, 0) + 1
        if not ok:
            self.errors[phase] = self.errors.get(phase, 0) + 1
        self.max_ms[phase] = max(self.max_ms.get(phase, 0.0), round(ms, 1))
        if engine_settings().runtime.on_lambda:
            from aws_lambda_powertools.metrics import MetricUnit, single_metric

            with single_metric(
                name=f"{phase}Ms", unit=MetricUnit.Milliseconds, value=ms, namespace="engram"
            ) as metric:
                metric.add_dimension(name="outcome", value="ok" if ok else "error")

    def as_json(self) -> dict[str, Any]:
        return {
            p: {"calls": n, "errors": self.errors.get(p, 0), "maxMs": self.max_ms.get(p, 0.0)}
            for p, n in self.calls.items()
        }


@dataclass
class Proxy:
    """Everything a proxied turn needs."""

    settings: ProxySettings
    engine: Engine
    memory: ChatMemory
    projects: ProjectResolver
    client: httpx.AsyncClient
    counters: Counters = field(default_factory=Counters)
    telemetry: Telemetry = field(default_factory=Telemetry)
    extract_transport: httpx.BaseTransport | None = None
    # The time a user turn started, by (conversation, digest of the turn's words): its tool rounds tell the
    # model the same time, so the block before the turn's message stays byte-identical (prompt caching)
    turn_started: TTLCache[tuple[str | None, str], str] = field(
        default_factory=lambda: TTLCache(maxsize=10_000, ttl=900)
    )
    _extractor: Extractor | None = None
    # Open while memory is too slow for a turn to wait for it (engram.breaker)
    memory_breaker: Breaker = field(init=False)

    def __post_init__(self) -> None:
        self.memory_breaker = Breaker(pause_s=self.settings.memory_pause_s)

    def extractor(self) -> Extractor:
        """The post-turn extractor (built on first use: only workers need it)."""
        if self._extractor is None:
            from .extract import ExtractionParts, Extractor

            engine = self.engine
            parts = ExtractionParts(engine.service, engine.state, engine.queue, self.projects, self.source)
            self._extractor = Extractor(self.settings, parts, self.extract_transport)
        return self._extractor

    @cached_property
    def source(self) -> LibreChatSource | None:
        """LibreChat's MongoDB as the source of the facts (None: no MongoDB configured); one per proxy."""
        return LibreChatSource(self.projects.db) if self.projects.db is not None else None

    def reconcile(self, job: LibreChatReconcileJob) -> None:
        """A step of the pass that takes LibreChat's deletions and edits to engram's facts."""
        source = self.source
        if source is None:
            log.info("librechat reconcile skipped: no LibreChat MongoDB is configured")
            return
        from .reconcile import Reconciler

        engine = self.engine
        Reconciler(engine.service, source, engine.queue.send).step(job)
        self.memory.forget_caches()

    def key_matches(self, presented: str | None) -> bool:
        """Whether the caller presented engram's proxy key (the admin key does not open the proxy)."""
        return key_matches(presented, self.settings.proxy_key)

    def user_key(self, presented: str | None) -> UserKey | None:
        """The user key the caller presented, when it is one of this proxy's bot (one read)."""
        key = access_keys.check(self.engine.state.user_keys, presented)
        return key if key is not None and key.bot == self.settings.bot else None


def build_proxy(
    settings: ProxySettings,
    engine: Engine,
    mongo_database: Any = None,
    transport: httpx.AsyncBaseTransport | None = None,
    telemetry: Telemetry | None = None,
) -> Proxy:
    """Build the proxy; tests pass a mongomock database, their own transport and telemetry."""
    project_cache = StatsCache(settings.cache_project_ttl_ms, settings.cache_max_entries)
    if mongo_database is not None:
        projects = ProjectResolver(mongo_database, project_cache)
    else:
        projects = ProjectResolver.from_uri(
            settings.mongo_uri, settings.mongo_db, settings.mongo_timeout_ms, project_cache
        )
    timeout = httpx.Timeout(settings.upstream_timeout_s, connect=10.0)
    client = httpx.AsyncClient(timeout=timeout, transport=transport, follow_redirects=False)
    memory = ChatMemory(settings, engine.service, projects, engine.state)
    engine.service.on_forget(memory.forgotten)  # nothing cached here may still serve someone forgotten
    return Proxy(
        settings,
        engine,
        memory,
        projects,
        client,
        telemetry=telemetry or Telemetry.from_settings(settings),
    )


_proxy: ProcessSingleton[Proxy] = ProcessSingleton(lambda: build_proxy(get_proxy_settings(), get_engine()))
get_proxy = _proxy.get
set_proxy = _proxy.set
