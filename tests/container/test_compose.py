"""The compose example as a LibreChat operator uses it: examples/librechat/ copied as it is, a `.env` with
the keys, and an override with only what these machines need (the lean image CI builds; a fake model
provider; LibreChat's own image replaced by a stand-in, since neither it nor MongoDB's can be pulled here).
The stand-in calls engram on the compose network by its service name, exactly as librechat.yaml tells
LibreChat to (endpoint baseURL, apiKey and headers; the MCP server's URL and headers). Then `down` and
`up` again: the engram-data volume keeps the memory."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import uuid

import pytest
import yaml

from infra.sam_local import bridge_gateway, forward
from tests.container.conftest import ROOT, docker
from tests.local_process import free_port
from tests.support import wait_until

EXAMPLE = ROOT / "examples" / "librechat"


@pytest.fixture(scope="module")
def compose() -> list[str]:
    done = subprocess.run(
        ["sh", "infra/image/compose.sh"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _filled(value, key: str, user: str, conversation: str):
    """What LibreChat sends for a librechat.yaml value: ${VAR} from its environment, {{...}} per request."""
    if isinstance(value, dict):
        return {k: _filled(v, key, user, conversation) for k, v in value.items()}
    if not isinstance(value, str):
        return value
    return (
        value.replace("${ENGRAM_PROXY_KEY}", key)
        .replace("{{LIBRECHAT_USER_ID}}", user)
        .replace("{{LIBRECHAT_BODY_CONVERSATIONID}}", conversation)
        .replace("{{LIBRECHAT_BODY_PARENTMESSAGEID}}", "00000000-0000-0000-0000-000000000000")
    )


def test_the_compose_example_serves_librechat_by_service_name_and_keeps_its_volume(
    compose, image, upstream, tmp_path
):
    project_dir = tmp_path / "librechat"
    shutil.copytree(EXAMPLE, project_dir)
    probe_dir = tmp_path / "probe"  # readable by the image's unprivileged user
    probe_dir.mkdir(mode=0o755)
    probe_dir.chmod(0o755)
    tmp_path.chmod(0o755)
    shutil.copy(ROOT / "tests" / "container" / "compose_probe.py", probe_dir / "compose_probe.py")
    (probe_dir / "compose_probe.py").chmod(0o644)
    key = secrets.token_hex(24)
    (project_dir / ".env").write_text(
        f"ENGRAM_PROXY_KEY={key}\nOPENAI_API_KEY=sk-upstream\nANTHROPIC_API_KEY=\n"
    )
    # the fake provider listens on loopback; containers reach the host at the default bridge's gateway
    gateway, port = bridge_gateway(), free_port()
    stop_forwarding = forward(gateway, {port: upstream.port})
    (project_dir / "docker-compose.override.yml").write_text(
        yaml.safe_dump(
            {
                "services": {
                    # health every 2 s, not the image's 30 s: only so the test need not wait half a minute
                    # per start
                    "engram": {
                        "image": image,
                        "healthcheck": {"interval": "2s"},
                        "environment": {
                            "UPSTREAMS": json.dumps(
                                [
                                    {
                                        "name": "openai",
                                        "baseUrl": f"http://{gateway}:{port}",
                                        "api": "openai",
                                        "apiKey": "${OPENAI_API_KEY}",
                                    }
                                ]
                            ),
                            "MEMORY_WRITE_MODE": "explicit",
                            # MongoDB's image cannot be pulled here: without it, no LibreChat settings to
                            # read (set but unreachable, every chat's opt-outs are unknown: memory off)
                            "LIBRECHAT_MONGO_URI": "",
                        },
                    },
                    "librechat": {
                        "image": image,
                        "entrypoint": ["python3", "/probe/compose_probe.py"],
                        "volumes": [f"{probe_dir}:/probe:ro"],
                    },
                }
            }
        )
    )
    config = yaml.safe_load((project_dir / "librechat.yaml").read_text())
    endpoint = _filled(config["endpoints"]["custom"][0], key, "erin", "conv-1")
    server = _filled(config["mcpServers"]["engram"], key, "erin", "conv-1")
    # LibreChat sends `headers` when it connects and `requestHeaders` with every request
    mcp = {"url": server["url"], "headers": {**server.get("headers", {}), **server.get("requestHeaders", {})}}
    project = f"engramtest{uuid.uuid4().hex[:8]}"

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*compose, "-p", project, *args],
            cwd=project_dir,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def librechat(say: list[str]) -> dict:
        probe = json.dumps({"endpoint": endpoint, "mcp": mcp, "say": say})
        done = run("run", "--rm", "--no-deps", "librechat", probe)
        assert done.returncode == 0, done.stdout + done.stderr + run("logs", "engram").stdout
        return json.loads(done.stdout.strip().splitlines()[-1])

    def healthy() -> bool:
        cid = run("ps", "-q", "engram").stdout.strip()
        return (
            bool(cid)
            and docker("inspect", "-f", "{{ .State.Health.Status }}", cid, check=False).stdout.strip()
            == "healthy"
        )

    try:
        up = run("up", "-d", "engram")
        assert up.returncode == 0, up.stdout + up.stderr
        assert wait_until(healthy, timeout_s=180, every_s=1), run("logs", "engram").stdout
        first = librechat(["Remember that my cat is called Miso.", "What is my cat called?"])
        assert all(first["answers"]) and "Miso" in first["found"]
        assert "Miso" in json.dumps(upstream.chats()[-1]["json"]["messages"])  # recalled into the second turn
        assert (
            upstream.chats()[-1]["headers"].get("authorization") == "Bearer sk-upstream"
        )  # engram's key, not LibreChat's

        down = run("down")  # the containers and network go; the named volume stays
        assert down.returncode == 0, down.stderr
        assert run("up", "-d", "engram").returncode == 0
        assert wait_until(healthy, timeout_s=180, every_s=1), run("logs", "engram").stdout
        assert "Miso" in librechat([])["found"]
        logs = run("logs", "engram").stdout
        assert (
            "engram is listening" in logs and key not in logs and "sk-upstream" not in logs
        )  # no secret in a log
    finally:
        run("down", "-v", timeout=120)
        stop_forwarding()
