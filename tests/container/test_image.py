"""engram's container image as a LibreChat operator runs it: built by `make image`'s script, started with
`docker run` (keys as files, state in a named volume, the host's network as these machines allow), driven
as LibreChat drives it — the openai SDK through the proxy, an MCP client on /mcp, the page — then stopped
(SIGTERM) and started again on the same volume with everything kept."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from tests.container.conftest import ROOT, docker
from tests.local_process import free_port
from tests.support import wait_until

ADMIN, PROXY = "container-admin-key", "container-proxy-key"


class Container:
    """One engram container on the host network with its keys as files and its state in a volume."""

    def __init__(self, image: str, upstream_url: str, secrets: Path):
        self.image, self.secrets = image, secrets
        self.volume = f"engram-test-{uuid.uuid4().hex[:8]}"
        self.port, self.name = free_port(), f"engram-test-{uuid.uuid4().hex[:8]}"
        (secrets / "admin").write_text(ADMIN + "\n")
        (secrets / "proxy").write_text(PROXY + "\n")
        (secrets / "upstreams").write_text(
            json.dumps([{"name": "fake", "baseUrl": upstream_url, "api": "openai", "apiKey": "sk-up"}])
        )
        os.chmod(secrets, 0o755)
        for f in secrets.iterdir():
            os.chmod(f, 0o644)
        self.url = f"http://127.0.0.1:{self.port}"

    def run(self) -> Container:
        docker(
            "run",
            "-d",
            "--name",
            self.name,
            "--network",
            "host",
            "--health-interval",
            "2s",
            "--health-start-period",
            "60s",
            "-v",
            f"{self.volume}:/data",
            "-v",
            f"{self.secrets}:/run/secrets:ro",
            "-e",
            f"ENGRAM_PORT={self.port}",
            "-e",
            f"ENGRAM_DYNAMODB_PORT={free_port()}",
            "-e",
            f"ENGRAM_SQS_PORT={free_port()}",
            "-e",
            "ENGRAM_API_KEY_FILE=/run/secrets/admin",
            "-e",
            "ENGRAM_PROXY_KEY_FILE=/run/secrets/proxy",
            "-e",
            "UPSTREAMS_FILE=/run/secrets/upstreams",
            "-e",
            "MEMORY_WRITE_MODE=explicit",
            self.image,
        )
        self.wait()
        return self

    def wait(self) -> None:
        def up():
            try:
                return httpx.get(f"{self.url}/livez", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_until(up, timeout_s=120, every_s=0.5), self.logs()

    def health(self) -> str:
        return docker("inspect", "-f", "{{ .State.Health.Status }}", self.name).stdout.strip()

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)
        docker("volume", "rm", "-f", self.volume, check=False)


@pytest.fixture
def container(image, upstream, tmp_path):
    c = Container(image, upstream.url, tmp_path)
    yield c
    c.remove()


def test_the_image_runs_as_librechat_uses_it_and_keeps_its_volume(container, upstream):
    import openai

    container.run()
    assert wait_until(lambda: container.health() == "healthy", timeout_s=60), container.health()
    assert docker("exec", container.name, "id", "-u").stdout.strip() != "0"  # not root
    headers = {"x-librechat-user-id": "erin", "x-librechat-conversation-id": "conv-1"}
    client = openai.OpenAI(base_url=f"{container.url}/fake/v1", api_key=PROXY, default_headers=headers)
    said = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "Remember that my cat is called Miso."}]
    )
    assert said.choices[0].message.content
    api = httpx.Client(base_url=container.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    # until the fact is found as the next turn will look for it: a fact is listed as soon as its record
    # is stored, and found once its point is written right after (its window read first: a loaded machine
    # can ask in between)
    assert wait_until(
        lambda: any(
            "Miso" in m["text"]
            for m in api.get("/v1/bots/librechat/memories", params={"userId": "erin", "query": "cat"}).json()[
                "memories"
            ]
        )
    )
    reply = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "What is my cat called?"}]
    )
    assert reply.choices[0].message.content
    told = json.dumps(upstream.chats()[-1]["json"]["messages"])
    assert "Miso" in told  # recalled before the turn, by words: the lean image embeds nothing
    assert "Miso" in _mcp_search(container.url, "cat")
    page = httpx.get(f"{container.url}/", timeout=10)
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert httpx.get(f"{container.url}/v1/bots", headers={"Authorization": "Bearer wrong"}).status_code == 401

    docker("stop", "-t", "30", container.name)  # SIGTERM: a clean stop
    assert "every write is on disk." in container.logs()
    assert ADMIN not in container.logs() and PROXY not in container.logs()  # a container's log holds no key
    docker("start", container.name)
    container.wait()
    kept = api.get("/v1/bots/librechat/memories", params={"userId": "erin"}).json()["memories"]
    assert [m["text"] for m in kept if "Miso" in m["text"]]
    assert "Miso" in _mcp_search(container.url, "cat")


def _mcp_search(url: str, query: str) -> str:
    """What an MCP client (LibreChat's) finds on /mcp: the same client the compose test's stand-in runs."""
    from tests.container.compose_probe import search

    headers = {
        "Authorization": f"Bearer {PROXY}",
        "x-librechat-user-id": "erin",
        "x-librechat-conversation-id": "conv-1",
    }
    return search({"url": f"{url}/mcp", "headers": headers}, query)


@pytest.fixture(scope="module")
def full_image():
    """engram:latest, the local embedder bundled (torch on CPU, the model in the image: nothing
    downloaded)."""
    env = {**os.environ, "EMBEDDER": "local", "TAG": "engram:latest"}
    built = subprocess.run(
        ["sh", "infra/image/build.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return "engram:latest"


def test_the_full_image_embeds_inside_the_container_and_searches_by_meaning(full_image, upstream, tmp_path):
    container = Container(full_image, upstream.url, tmp_path)
    try:
        container.run()
        api = httpx.Client(base_url=container.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
        assert wait_until(lambda: api.get("/healthz").json().get("embedderWarm"), timeout_s=180, every_s=1), (
            container.logs()
        )
        for text in (
            "The boat is called Marlin.",
            "The garden has three rowan trees.",
            "Lena plays the oboe.",
        ):
            assert api.post("/v1/bots/meaning/memories", json={"text": text}).status_code == 201
        # no word is shared with the memory: only its vector can find it
        found = api.get("/v1/bots/meaning/memories", params={"query": "musical instrument", "limit": 1})
        assert found.headers["x-engram-search"] == "words+meaning"
        assert [m["text"] for m in found.json()["memories"]] == ["Lena plays the oboe."]
    finally:
        container.remove()
