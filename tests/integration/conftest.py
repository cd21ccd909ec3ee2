"""Integration fixtures: the real local stack (moto server, embedded Qdrant, MiniLM, uvicorn) on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest

from infra.local_stack import LocalStack

KEY = "integration-key"


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
