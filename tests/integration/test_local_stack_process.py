"""`make run`'s process for real: starts, answers, stops on Ctrl-C, and keeps its state across a restart."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.local_process import PORT_TAKEN, answers_as_engram, free_port
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


def warm(port: int, key: str, timeout_s: float = 120) -> None:
    """Wait for what the stack reports: its model loaded (meaning joins searches from then on)."""
    auth = {"Authorization": f"Bearer {key}"}
    assert wait_until(
        lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", headers=auth).json().get("embedderWarm"),
        timeout_s=timeout_s,
        every_s=0.2,
    )


def start(data_dir: Path) -> tuple[subprocess.Popen, int]:
    """`make run`'s process on a port free now (a restart's old one may have been taken since its stop);
    tried again on another port if it loses that one to another process before it binds."""
    for _ in range(3):
        port = free_port()
        env = {
            **os.environ,
            "ENGRAM_DATA_DIR": str(data_dir),
            "ENGRAM_PORT": str(port),
            "ENGRAM_DYNAMODB_PORT": "0",
            "ENGRAM_SQS_PORT": "0",
        }  # never collide with a running `make run`
        env.pop("ENGRAM_API_KEY", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "infra.local_stack"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None and not answers_as_engram(port):
            time.sleep(0.3)
        if proc.poll() is None and answers_as_engram(port):
            return proc, port
        if proc.poll() is None:
            proc.kill()
            raise AssertionError("the local stack did not answer /healthz in 90 s")
        out = proc.stdout.read()
        if PORT_TAKEN not in out:
            raise AssertionError(out)
    raise AssertionError(f"no free port held for the local stack in 3 tries: {out}")


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def test_state_survives_a_restart(tmp_path):
    proc, port = start(tmp_path)
    key = (tmp_path / "api-key").read_text().strip()
    auth = {"Authorization": f"Bearer {key}"}
    base = f"http://127.0.0.1:{port}/v1/bots/restart/memories"
    try:
        first = httpx.post(
            base, json={"text": "Lena's birthday is on the ninth of March."}, headers=auth
        ).json()
        httpx.post(base, json={"text": "The garage door code is 4417."}, headers=auth)
    finally:
        out = stop(proc)
    # output to a pipe, not a terminal: the banner says where the key is, never the key (a log is no place
    # for it)
    assert key not in out and f"in {(tmp_path / 'api-key').resolve()}" in out
    assert "every write is on disk" in out
    # people's words and the keys: readable by their owner alone, folders and files
    (tmp_path / "left-by-an-older-engram").write_text("x")
    (tmp_path / "left-by-an-older-engram").chmod(0o644)
    open_to_others = [
        p
        for p in [tmp_path, *tmp_path.rglob("*")]
        if p.stat().st_mode & 0o077 and p.name != "left-by-an-older-engram"
    ]
    assert open_to_others == []

    proc, port = start(tmp_path)
    base = f"http://127.0.0.1:{port}/v1/bots/restart/memories"
    try:
        assert (tmp_path / "api-key").read_text().strip() == key  # generated once
        assert (tmp_path / "left-by-an-older-engram").stat().st_mode & 0o077 == 0  # tightened at start
        listed = httpx.get(base, headers=auth).json()["memories"]
        assert [m["text"] for m in listed] == [
            "The garage door code is 4417.",
            "Lena's birthday is on the ninth of March.",
        ]
        # Right after the start the model may still be loading: words answer at once, and say so
        early = httpx.get(base, params={"query": "Lena's birthday", "limit": 1}, headers=auth)
        assert early.json()["memories"][0]["id"] == first["id"]
        assert early.headers["x-engram-search"] in ("words", "words+meaning")
        warm(port, key)

        # the model is loaded; vectors the first run never made (it stopped before its model was warm)
        # follow by a job, so meaning joins once the first of them is in
        def by_meaning() -> httpx.Response | None:
            r = httpx.get(base, params={"query": "When was Lena born?", "limit": 1}, headers=auth)
            return r if r.json()["meaning"] else None

        assert wait_until(by_meaning, timeout_s=60, every_s=0.5)
        found = by_meaning()
        assert found is not None and found.json()["memories"][0]["id"] == first["id"]
        again = httpx.post(base, json={"text": "lena's birthday is on the ninth of march."}, headers=auth)
        assert again.status_code == 200 and again.json()["id"] == first["id"]
        third = httpx.post(base, json={"text": "A new fact after the restart."}, headers=auth).json()
        assert int(third["id"].split(":")[1]) > int(first["id"].split(":")[1])  # ids keep counting
    finally:
        stop(proc)


def test_a_search_in_the_first_second_answers_by_words_without_waiting_for_the_model(tmp_path):
    """A restarted stack answers a search at once, by words, while its model loads; meaning joins once it is
    warm, and a memory written while the model loaded gets its vector within seconds, not at the next
    sweep."""
    proc, port = start(tmp_path)
    key = (tmp_path / "api-key").read_text().strip()
    auth = {"Authorization": f"Bearer {key}"}
    base = f"http://127.0.0.1:{port}/v1/bots/first/memories"
    try:
        assert (
            httpx.post(
                base, json={"text": "The spare key hangs behind the blue shutter."}, headers=auth
            ).status_code
            == 201
        )
    finally:
        stop(proc)
    proc, port = start(tmp_path)
    base = f"http://127.0.0.1:{port}/v1/bots/first/memories"
    try:
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", headers=auth).json()
        began = time.monotonic()
        early = httpx.get(base, params={"query": "spare key", "limit": 3}, headers=auth, timeout=30)
        took = time.monotonic() - began
        assert [m["text"] for m in early.json()["memories"]] == [
            "The spare key hangs behind the blue shutter."
        ]
        if not health["embedderWarm"]:  # the model takes ~3.5 s to load: it was cold when we asked
            assert early.headers["x-engram-search"] == "words" and early.json()["meaning"] is False
            assert took < 2.5, f"a search waited {took:.1f} s for a cold model"
        # written while the model loads: the words now, the meaning as soon as the model is warm
        httpx.post(
            base, json={"text": "The owner drinks green tea, not coffee."}, headers=auth
        ).raise_for_status()
        warm(port, key)

        def by_meaning():
            r = httpx.get(base, params={"query": "favourite beverage", "limit": 1}, headers=auth).json()
            return (
                r["meaning"]
                and r["memories"]
                and r["memories"][0]["text"] == "The owner drinks green tea, not coffee."
            )

        assert wait_until(by_meaning, timeout_s=10, every_s=0.2)  # the sweep runs once a minute: not it
    finally:
        stop(proc)


DOCUMENTED = {  # every variable the README documents for `make run`, set the way it documents them
    "ENGRAM_HOST": "127.0.0.1",
    "ENGRAM_EMBEDDER": "off",
    "ENGRAM_EMBEDDING_MODEL": "all-minilm",
    "ENGRAM_OLLAMA_URL": "http://127.0.0.1:11434",
    "ENGRAM_COLLECTION": "engram",
    "UPSTREAMS": '[{"name": "openai", "baseUrl": "https://api.openai.com", "apiKey": "sk-x"}, '
    '{"name": "ollama", "baseUrl": "http://127.0.0.1:11434/v1", "open": true}]',
    "LIBRECHAT_MONGO_URI": "mongodb://127.0.0.1:27017/LibreChat",
    "LIBRECHAT_MONGO_DB": "LibreChat",
    "LIBRECHAT_USER_HEADER": "x-librechat-user-id",
    "LIBRECHAT_CONVERSATION_HEADER": "x-librechat-conversation-id",
    "MEMORY_DEFAULT_ENABLED": "true",
    "MEMORY_RECALL_ENABLED": "true",
    "MEMORY_WRITE_MODE": "explicit",
    "MEMORY_RECALL_LIMIT": "6",
    "MEMORY_MAX_CONTEXT_CHARS": "4000",
    "MEMORY_QUERY_MESSAGE_COUNT": "3",
    "MEMORY_MAX_PER_TURN": "3",
    "MEMORY_DEDUPE_THRESHOLD": "0.82",
    "MEMORY_COMMAND_PREFIX": "/memory",
    "PROMPT_DATETIME_ENABLED": "true",
    "EXTRACT_BASE_URL": "http://127.0.0.1:11434/v1",
    "EXTRACT_MODEL": "qwen",
    "EXTRACT_API_KEY": "none",
    "CACHE_RECALL_TTL_MS": "120000",
    "CACHE_SETTINGS_TTL_MS": "30000",
    "CACHE_PROJECT_TTL_MS": "300000",
    "CACHE_MAX_ENTRIES": "5000",
    "MCP_ENABLED": "true",
    "DISCORD_APPLICATION_ID": "900",
    "DISCORD_PUBLIC_KEY": "00" * 32,
    "DISCORD_BOT_TOKEN": "token",
    "DISCORD_API_BASE": "https://discord.com/api/v10",
    "DISCORD_CHANNELS_DISALLOWED": "C12,C13",
    "OLLAMA_CHAT_MODEL": "llama3",
    "OLLAMA_VISION_MODEL": "llava",
    "MEMORY_TOP_K": "5",
    "DISCORD_BACKFILL_PAGES_PER_JOB": "5",
    "LINK_FETCH_ALLOW_NETWORKS": "10.0.0.0/8,192.168.1.0/24",
}


def test_make_run_starts_with_every_documented_variable_set(tmp_path, monkeypatch):
    for name, value in DOCUMENTED.items():
        monkeypatch.setenv(name, value)
    proc, port = start(tmp_path)
    try:
        health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
        assert health["ok"] is True
        # a signed-looking Discord request is refused (wrong key), not a crash of the Discord settings
        assert httpx.post(f"http://127.0.0.1:{port}/discord/interactions", content=b"{}").status_code == 401
    finally:
        stop(proc)


def test_make_run_starts_with_every_variable_empty(tmp_path, monkeypatch):
    """What the template does with unused parameters: every variable set, to ""."""
    for name in DOCUMENTED:
        if name != "ENGRAM_HOST":
            monkeypatch.setenv(name, "")
    monkeypatch.setenv("ENGRAM_EMBEDDER", "off")
    proc, port = start(tmp_path)
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json()["ok"] is True
    finally:
        stop(proc)


def test_a_deleted_index_comes_back_by_itself(tmp_path):
    """Vectors are derived data: with the Qdrant directory gone, the next start rebuilds it from the
    records."""
    import shutil

    from tests.support import wait_until

    proc, port = start(tmp_path)
    auth = {"Authorization": f"Bearer {(tmp_path / 'api-key').read_text().strip()}"}
    base = f"http://127.0.0.1:{port}/v1/bots/rebuild/memories"
    try:
        for text in (
            "The boat is called Marlin.",
            "The garden has three rowan trees.",
            "Lena plays the oboe.",
        ):
            assert httpx.post(base, json={"text": text}, headers=auth, timeout=30).status_code == 201
    finally:
        out = stop(proc)
    assert "proxy key" in out and "admin key" in out
    shutil.rmtree(tmp_path / "qdrant")
    proc, port = start(tmp_path)
    base = f"http://127.0.0.1:{port}/v1/bots/rebuild/memories"
    try:

        def found():
            hits = httpx.get(base, params={"query": "musical instrument", "limit": 1}, headers=auth).json()[
                "memories"
            ]
            return hits and hits[0]["text"] == "Lena plays the oboe." and "score" in hits[0]

        assert wait_until(found, timeout_s=60)
        index = httpx.get(f"http://127.0.0.1:{port}/v1/index", headers=auth).json()
        assert index["error"] is None
    finally:
        stop(proc)


def test_a_second_stack_on_the_same_data_dir_says_so_in_one_line(tmp_path):
    proc, port = start(tmp_path)
    try:
        env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path), "ENGRAM_PORT": "0"}
        env.update(ENGRAM_DYNAMODB_PORT="0", ENGRAM_SQS_PORT="0")
        second = subprocess.run(
            [sys.executable, "-m", "infra.local_stack"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr.strip().count("\n") == 0 and "Traceback" not in second.stderr + second.stdout
        assert (
            f"another engram stack (process {proc.pid}) is running on {tmp_path.resolve()}" in second.stderr
        )
        assert answers_as_engram(port)  # the first one is untouched
    finally:
        stop(proc)


def test_ctrl_c_stops_within_five_seconds_even_while_the_model_loads_and_says_when_it_is_ready(tmp_path):
    proc, port = start(tmp_path)  # answers as soon as it listens: the model is still loading then
    started = time.monotonic()
    out = stop(proc)
    assert time.monotonic() - started < 5, out
    assert "every write is on disk" in out and "Traceback" not in out and "terminate called" not in out

    proc, port = start(tmp_path)
    warm(port, (tmp_path / "api-key").read_text().strip())
    time.sleep(0.5)  # "ready" is printed by a thread once the model has answered: just after /healthz says so
    out = stop(proc)
    lines = out.splitlines()
    assert any(line.startswith("ready: search by meaning works") for line in lines), out
    logged = [line for line in lines if line.startswith("{")]
    assert logged and all(json.loads(line)["service"] == "engram" for line in logged)  # one format: JSON
    assert not any("it/s]" in line or "Batches" in line for line in lines)  # no progress bars
