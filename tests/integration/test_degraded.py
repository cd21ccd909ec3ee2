"""Dependencies going down behind the running stack: writes keep their records, search answers by words,
and vectors fill in once the dependency is back."""

import httpx
import pytest

from infra.local_stack import LocalStack
from tests.integration.conftest import KEY
from tests.support import SwitchableEmbedder, SwitchableIndex, wait_until


@pytest.fixture(scope="module")
def flaky(tmp_path_factory, local_embedder):
    embedder = SwitchableEmbedder(local_embedder)
    s = LocalStack(
        tmp_path_factory.mktemp("engram"),
        port=0,
        api_key=KEY,
        embedder=embedder,
        sweep_every_s=0.5,
        sweep_grace_ms=0,
        index_wrapper=SwitchableIndex,
    ).start()
    yield s, embedder, s.engine.service.index
    s.stop()


@pytest.fixture
def api(flaky):
    with httpx.Client(
        base_url=flaky[0].url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as client:
        yield client


def test_embedder_down_then_back(flaky, api):
    stack, embedder, _ = flaky
    api.post("/v1/bots/deg/memories", json={"text": "Priya keeps three cats at home."})
    embedder.down = True
    added = api.post("/v1/bots/deg/memories", json={"text": "Jonas plays the cello in an orchestra."})
    assert added.status_code == 201
    # words at once
    found = api.get("/v1/bots/deg/memories", params={"query": "cello"}).json()["memories"]
    assert found[0]["id"] == added.json()["id"]
    assert (
        "did not answer"
        in httpx.get(f"{stack.url}/healthz", headers={"Authorization": f"Bearer {KEY}"}).json()["lastError"]
    )
    embedder.down = False
    # by meaning once the sweep has filled its vector (no shared word with the memory)
    assert wait_until(lambda: not stack.engine.service.records.pending.ids("deg", 10))
    found = api.get("/v1/bots/deg/memories", params={"query": "Who is a musician?", "limit": 1}).json()[
        "memories"
    ]
    assert found[0]["id"] == added.json()["id"]


def test_index_down_then_back(flaky, api):
    stack, _, index = flaky
    index.down = True
    added = api.post("/v1/bots/deg2/memories", json={"text": "The spare key is under the flowerpot."})
    assert added.status_code == 201
    assert api.get("/v1/bots/deg2/memories").json()["memories"][0]["id"] == added.json()["id"]
    found = api.get("/v1/bots/deg2/memories", params={"query": "spare key"}).json()["memories"]
    assert [m["id"] for m in found] == [added.json()["id"]]
    # deleting would leave a vector behind: refused whole with a clear 503, nothing lost
    r = api.delete(f"/v1/bots/deg2/memories/{added.json()['id']}")
    assert r.status_code == 503 and r.json()["error"]["code"] == "index_unavailable"
    index.down = False
    assert wait_until(lambda: not stack.engine.service.records.pending.ids("deg2", 10))
    found = api.get(
        "/v1/bots/deg2/memories", params={"query": "Where can I find a way into the house?", "limit": 1}
    )
    assert found.json()["memories"][0]["id"] == added.json()["id"]
