"""Deleted words leave the disk, not only the reads: `make run` as a process, its data dir grepped byte for
byte (LevelDB's tables and log, the queue journal, the embedded index's segments and WAL). A forget cut
off by kill -9 half a second after it answered is purged at the next start (the purge is marked on disk
before the forget answers); a single DELETE and a PATCH are purged within a minute, and at a clean stop."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.fake_discord import FakeDiscord
from tests.local_process import Stack, free_port

BOT = "purge"


@pytest.fixture
def embedder():
    fake = FakeDiscord().start()  # its Ollama-shaped /api/embed (deterministic vectors)
    yield fake
    fake.stop()


def stack_env(embedder) -> dict[str, str]:
    return {
        "ENGRAM_EMBEDDER": "ollama",
        "ENGRAM_OLLAMA_URL": embedder.url,
        "ENGRAM_EMBEDDING_MODEL": "hash-a",
        "ENGRAM_SQS_PORT": str(free_port()),  # fixed: the test reads the queues to settle them
        "ENGRAM_DYNAMODB_PORT": str(free_port()),
    }


def on_disk(data: Path) -> str:
    """Every byte of every file in the data dir (the stack's own logs included)."""
    return b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file()).decode("latin-1")


def add(stack: Stack, text: str, user: str) -> str:
    r = stack.api.post(f"/v1/bots/{BOT}/memories", json={"text": text, "userId": user})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def test_a_forget_cut_off_by_kill_9_is_purged_at_the_next_start(tmp_path, embedder):
    canary = f"vorquell{uuid.uuid4().hex[:6]}"
    stack = Stack(tmp_path, stack_env(embedder)).start()
    try:
        for n in range(5):
            add(stack, f"Alice's note {n}: {canary} lives in the shed.", "alice")
        add(stack, "Bob keeps the ladder.", "bob")
        stack.settle()
        gone = stack.api.delete(f"/v1/bots/{BOT}/users/alice/memories")
        assert gone.status_code == 200 and gone.json()["deleted"]["done"] is True
        time.sleep(0.5)
        stack.kill()  # before the index was rewritten (2 s after a forget)
        assert (tmp_path / "purge-wanted").exists()  # the purge is on disk, waiting
        stack.start()
    finally:
        stack.stop()
    assert canary not in on_disk(tmp_path)
    assert not (tmp_path / "purge-wanted").exists()


def test_a_single_delete_and_change_leave_no_old_words_on_disk_after_a_clean_stop(tmp_path, embedder):
    deleted, changed = f"quimbrel{uuid.uuid4().hex[:6]}", f"sardonyx{uuid.uuid4().hex[:6]}"
    stack = Stack(tmp_path, stack_env(embedder)).start()
    try:
        first = add(stack, f"The spare key is under the {deleted} pot.", "carol")
        second = add(stack, f"The wifi name is {changed}.", "carol")
        add(stack, "Carol likes plums.", "carol")
        stack.settle()
        assert stack.api.delete(f"/v1/bots/{BOT}/memories/{first}").status_code in (200, 204)
        text = {"text": "The wifi name is lantern."}
        patched = stack.api.patch(f"/v1/bots/{BOT}/memories/{second}", json=text)
        assert patched.status_code == 200, patched.text
        # a change keeps the old text in the memory's history (GET …/history) until that is cleared
        history = stack.api.get(f"/v1/bots/{BOT}/memories/{second}/history").json()["history"]
        assert [v["text"] for v in history] == [f"The wifi name is {changed}."]
        assert stack.api.delete(f"/v1/bots/{BOT}/memories/{second}/history").status_code == 204
        stack.settle()
    finally:
        stack.stop()
    raw = on_disk(tmp_path)
    assert deleted not in raw and changed not in raw and "lantern" in raw
