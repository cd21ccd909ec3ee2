"""Integration fixtures: the real local stack (moto server, embedded Qdrant, MiniLM, uvicorn) on 127.0.0.1,
and an engine on moto in-process with both index implementations (the service's own suites)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from moto import mock_aws

from engram.config import Settings
from engram.config.proxy import ProxySettings
from engram.engine import build_engine, set_engine
from engram.proxy.runtime import set_proxy
from engram.vectors.edge import EdgeIndex
from engram.vectors.server import QdrantServerIndex
from infra.aws_template import create_queues, create_tables
from infra.local_stack import LocalStack
from tests.support import HashEmbedder, SwitchableIndex

KEY = "integration-key"


def proxy_stack(
    root: Path, embedder: Any, upstreams: list[dict[str, Any]], proxy_key: str, **options: Any
) -> LocalStack:
    """A started local stack whose proxy relays to these upstreams (as UPSTREAMS lists them) for callers
    with `proxy_key`; `options` are the stack's own (sweep_every_s, mongo_database, ...)."""
    settings = ProxySettings(UPSTREAMS=json.dumps(upstreams), ENGRAM_PROXY_KEY=proxy_key)
    return LocalStack(
        root, port=0, api_key=KEY, embedder=embedder, proxy_settings=settings, **options
    ).start()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder):
    """One local stack per test module, listening on a free port."""
    s = LocalStack(
        tmp_path_factory.mktemp("engram"), port=0, api_key=KEY, embedder=local_embedder, sweep_every_s=1
    ).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def upstream():
    """A fake model provider (OpenAI and Anthropic) on 127.0.0.1, one per test module."""
    from tests.fake_upstream import FakeUpstream

    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture
def api(stack):
    """An httpx client with the bearer key."""
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        yield client


TABLES = {"MemoriesTable": "t-memories", "StateTable": "t-state"}


@pytest.fixture
def aws():
    """DynamoDB tables and the jobs queue, as template.yaml declares them, under moto."""
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        create_tables(dynamodb, TABLES)
        queues = create_queues(sqs, "t")
        yield {
            "dynamodb": dynamodb,
            "sqs": sqs,
            "queue_url": queues["JobsQueue"],
            "interactive_queue_url": queues["InteractiveQueue"],
            "dlq_url": queues["JobsDeadLetterQueue"],
        }


@pytest.fixture(params=["edge", "qdrant-rest"])
def raw_index(request, tmp_path):
    """Both index implementations: qdrant-edge in-process, and the REST client against Qdrant's REST API
    (answered by qdrant-client's local engine, bodies checked against its request models)."""
    if request.param == "edge":
        index = EdgeIndex(tmp_path / "shard")
        yield index
        index.close()
        return
    from tests.fake_qdrant import FakeQdrant

    server = FakeQdrant(api_key="qdrant-unit-key").start()
    index = QdrantServerIndex.connect(server.url, "qdrant-unit-key", "engram")
    yield index
    index.close()
    server.stop()


@pytest.fixture
def embedder():
    return HashEmbedder()


def moto_settings(aws, tmp_path, **changes) -> Settings:
    """The settings of an engine on the `aws` fixture's tables and jobs queue (`changes`: any others)."""
    return Settings(
        memories_table=TABLES["MemoriesTable"],
        state_table=TABLES["StateTable"],
        jobs_queue_url=aws["queue_url"],
        data_dir=tmp_path,
        api_key="unit-key",
        **changes,
    )


@pytest.fixture
def engine(aws, raw_index, embedder, tmp_path):
    """An engine on moto + a real index + the fake embedder; the index can be taken down."""
    settings = moto_settings(aws, tmp_path)
    eng = build_engine(settings, index=SwitchableIndex(raw_index), embedder=embedder, sqs_client=aws["sqs"])
    set_engine(eng)
    yield eng
    set_engine(None)
    set_proxy(None)


@pytest.fixture
def service(engine):
    return engine.service
