"""Wiring: one engine per process (module-level singleton), built from the settings at first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import Settings, get_settings
from .config.secrets import secure_parameter
from .embedders import Embedder, NoEmbedder, build_embedder
from .engine_parts import Engine
from .jobs import JobQueue, build_queue
from .ports import RecordsPort, StatePort
from .service import MemoryService
from .singleton import ProcessSingleton
from .store import RecordStore, StateStore, bind_tables
from .vectors import VectorIndex

if TYPE_CHECKING:
    from .config.proxy import Upstream


def _secret(settings: Settings) -> Settings:
    if settings.qdrant_url and not settings.qdrant_api_key and settings.qdrant_api_key_parameter:
        key = secure_parameter(settings.qdrant_api_key_parameter)
        return settings.model_copy(update={"qdrant_api_key": key})
    return settings


def build_index(settings: Settings) -> VectorIndex:
    """Qdrant at a URL when one is configured, else the embedded engine under the data dir."""
    if settings.qdrant_url:
        from .vectors.server import QdrantServerIndex

        return QdrantServerIndex.connect(
            settings.qdrant_url,
            settings.qdrant_api_key,
            settings.collection,
            shards=settings.qdrant_shards,
            replicas=settings.qdrant_replicas,
            write_consistency=settings.qdrant_write_consistency,
        )
    from .vectors.edge import EdgeIndex

    return EdgeIndex(settings.data_dir / "qdrant" / settings.collection)


def build_engine(  # noqa: PLR0913 - each a part a test or the local stack hands in instead of the default
    settings: Settings,
    index: VectorIndex | None = None,
    embedder: Embedder | NoEmbedder | None = None,
    sqs_client: Any = None,
    *,
    stores: tuple[RecordsPort, StatePort] | None = None,
    queue: JobQueue | None = None,
) -> Engine:
    """Build an engine: the DynamoDB stores, SQS and the index and embedder the settings name; tests pass
    their own index, embedder, SQS client, or stores and queue (unit tests: the in-memory ones)."""
    settings = _secret(settings)
    if stores is None:
        bind_tables(settings)
        stores = RecordStore(), StateStore()
    records, state = stores
    queue = queue if queue is not None else build_queue(settings, sqs_client)
    service = MemoryService(
        records=records,
        state=state,
        index=index if index is not None else build_index(settings),
        embedder=embedder if embedder is not None else build_embedder(settings),
        queue=queue,
    )
    from .embedding import EmbeddingManager, defaults_from, providers_from

    upstreams: list[Upstream] = []
    try:
        from .config import get_proxy_settings

        upstreams = get_proxy_settings().upstreams
    except Exception:  # no proxy configured: Ollama and ENGRAM_REMOTE_EMBEDDINGS_URL only
        pass
    manager = EmbeddingManager(service, queue, providers_from(settings, upstreams), defaults_from(settings))
    from .keeper import IndexKeeper

    return Engine(
        settings=settings,
        state=state,
        service=service,
        queue=queue,
        embedding=manager,
        keeper=IndexKeeper(service.indexer),
    )


_engine: ProcessSingleton[Engine] = ProcessSingleton(lambda: build_engine(get_settings()))
get_engine = _engine.get
set_engine = _engine.set
