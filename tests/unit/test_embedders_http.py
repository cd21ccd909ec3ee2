"""Ollama and OpenAI-style embedders, with httpx's transport swapped for a scripted server."""

import json

import httpx
import pytest

from engram.config import Settings
from engram.embedders import NoEmbedder, build_embedder, vector_name
from engram.embedders.http import OllamaEmbedder, OpenAIEmbedder
from engram.errors import EmbedderUnavailable, InvalidInput


def ollama_server(requests):
    def handle(request: httpx.Request):
        body = json.loads(request.content)
        requests.append((request.url.path, body))
        if body["model"] != "all-minilm":
            return httpx.Response(404, json={"error": f"model '{body['model']}' not found"})
        return httpx.Response(200, json={"embeddings": [[float(len(t)), 1.0] for t in body["input"]]})

    return httpx.MockTransport(handle)


def test_ollama_batches_and_keeps_order():
    seen = []
    emb = OllamaEmbedder("http://ollama:11434", "all-minilm", batch_size=2, transport=ollama_server(seen))
    assert emb.embed(["a", "bb", "ccc"]) == [[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]
    assert [path for path, _ in seen] == ["/api/embed", "/api/embed"]
    assert [body["input"] for _, body in seen] == [["a", "bb"], ["ccc"]]


def test_ollama_unknown_model_is_a_clear_error():
    emb = OllamaEmbedder("http://ollama:11434", "nomic-embed-text", transport=ollama_server([]))
    with pytest.raises(EmbedderUnavailable, match="404.*nomic-embed-text"):
        emb.embed(["a"])


def test_ollama_unreachable_is_unavailable():
    def refuse(request):
        raise httpx.ConnectError("connection refused")

    emb = OllamaEmbedder("http://ollama:11434", "all-minilm", transport=httpx.MockTransport(refuse))
    with pytest.raises(EmbedderUnavailable, match="did not answer"):
        emb.embed(["a"])


@pytest.mark.parametrize(
    "payload", [{"embeddings": [[1.0]]}, {"embeddings": "nope"}, {"x": 1}, {"embeddings": [["a"], [1]]}]
)
def test_ollama_nonsense_is_unavailable(payload):
    emb = OllamaEmbedder(
        "http://o", "all-minilm", transport=httpx.MockTransport(lambda r: httpx.Response(200, json=payload))
    )
    with pytest.raises(EmbedderUnavailable):
        emb.embed(["a", "b"])


def test_openai_style_sends_key_and_reorders_by_index():
    seen = []

    def handle(request: httpx.Request):
        seen.append((request.url.path, request.headers.get("authorization")))
        body = json.loads(request.content)
        data = [{"index": i, "embedding": [float(i)]} for i in range(len(body["input"]))]
        return httpx.Response(200, json={"data": list(reversed(data)), "model": body["model"]})

    emb = OpenAIEmbedder(
        "https://api.example/v1",
        "text-embedding-3-small",
        api_key="sk-1",
        transport=httpx.MockTransport(handle),
    )
    assert emb.embed(["a", "b", "c"]) == [[0.0], [1.0], [2.0]]
    assert seen == [("/v1/embeddings", "Bearer sk-1")]


def test_openai_style_error_status_is_unavailable():
    emb = OpenAIEmbedder(
        "http://x",
        "m",
        transport=httpx.MockTransport(lambda r: httpx.Response(401, json={"error": "bad key"})),
    )
    with pytest.raises(EmbedderUnavailable, match="401"):
        emb.embed(["a"])


def test_factory_and_vector_names():
    assert isinstance(build_embedder(Settings(embedder="off")), NoEmbedder)
    with pytest.raises(EmbedderUnavailable):
        NoEmbedder().embed(["a"])
    with pytest.raises(InvalidInput):
        build_embedder(Settings(embedder="remote"))
    assert vector_name("ollama", "all-minilm") == "dense-ollama-all-minilm"
    assert vector_name("remote", "text-embedding-3-small") != vector_name("ollama", "text-embedding-3-small")


def test_batches_go_to_the_bulk_ollama_and_queries_to_the_online_one():
    """Issue 32: a query embed (and a live write's few texts) never queues behind a backfill's batch of 64
    on the same Ollama, when the settings name a second one; unset, one serves both."""
    hosts = []

    def handle(request: httpx.Request):
        hosts.append(request.url.host)
        return httpx.Response(
            200, json={"embeddings": [[1.0, 0.0] for _ in json.loads(request.content)["input"]]}
        )

    settings = Settings(
        embedder="ollama", ollama_url="http://online:11434", ollama_bulk_url="http://bulk:11434"
    )
    emb = build_embedder(settings, http_transport=httpx.MockTransport(handle))
    emb.embed(["what did I say about tea?"])
    emb.embed([f"message {n}" for n in 100 * [0]])
    assert hosts == ["online", "bulk", "bulk"]  # 100 texts: two batches of at most 64
    hosts.clear()
    one = build_embedder(
        Settings(embedder="ollama", ollama_url="http://online:11434"), httpx.MockTransport(handle)
    )
    one.embed(["q"])
    one.embed(["t"] * 20)
    assert hosts == ["online", "online"]
