"""A forget of 20,000 records cut off at every step: the real `make run` process is frozen at the step
(tests/freeze_point), read as a user would read it, killed with kill -9 and started again, which resumes
the forget; the next start freezes it at the next step. At every stop nothing of the user is findable by
list, get, search or export, and the last start finishes the forget by itself."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from tests.local_process import Stack, free_port
from tests.support import wait_until

pytestmark = pytest.mark.timeout(3000)

BOT, RECORDS, EVERY_BOB = "crashbot", 20_000, 500
FREEZE_DIR = Path(__file__).resolve().parents[1] / "freeze_point"

# Where the forget is frozen, in the order a forget reaches them: the first in the HTTP door's own call,
# the others in the forget the next start resumes (counts are per process).
STEPS = [
    "engram.store.state.forgets:Tombstones.begin:1",  # marked under way, no tombstone yet
    "engram.store.state.forgets:Tombstones.mark:1",  # tombstone, consent and vectors still there
    "engram.vectors.edge:EdgeIndex.delete_scope:1",  # their points gone, records and contexts not
    "engram.store.records:RecordStore.clear_context:20",  # half of the contexts quoting them cleared
    "engram.store.records:RecordStore.delete:60",  # 6,000 of their records deleted
    "engram.store.claims:Claims.drop:1",  # records gone, the last vector pass not run
    "engram.store.state.forgets:Tombstones.end:1:before",  # everything done but the mark
]


def lines() -> str:
    """Alice's 20,000 messages in ten threads, with one of Bob's every 500 quoting her (its context)."""
    out = []
    for i in range(RECORDS + RECORDS // EVERY_BOB):
        bob = i % (EVERY_BOB + 1) == EVERY_BOB
        minute = i // 60
        out.append(
            {
                "kind": "message",
                "text": f"thanks {i}" if bob else f"zephyrine note {i} in the quokka ledger",
                "userId": "bob" if bob else "alice",
                "sourceMessageId": f"m{i}",
                "threadId": f"t{i % 10}",
                "createdAt": f"2026-11-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:"
                f"{i % 60:02d}Z",
            }
        )
    return "\n".join(json.dumps(line) for line in out)


def start(tmp_path: Path, env: dict[str, str], freeze: str = "") -> Stack:
    extra = {"ENGRAM_TEST_FREEZE": freeze, "ENGRAM_TEST_FREEZE_FILE": str(tmp_path / "frozen")}
    return Stack(tmp_path, {**env, **extra, "PYTHONPATH": str(FREEZE_DIR)}).start()


def frozen(tmp_path: Path, step: str) -> bool:
    flag = tmp_path / "frozen"
    return flag.exists() and flag.read_text() == step


def nothing_of_alice(stack: Stack, one_of_hers: int) -> None:
    """What a user can read: no record of hers, no word of hers in anyone's, by any read path."""
    api = stack.api
    assert api.get(f"/v1/bots/{BOT}/memories", params={"kind": "message", "userId": "alice"}).json() == {
        "memories": []
    }
    newest = api.get(f"/v1/bots/{BOT}/memories", params={"kind": "message", "limit": 500}).json()["memories"]
    assert {m["userId"] for m in newest} <= {"bob"}
    found = api.get(
        f"/v1/bots/{BOT}/memories", params={"kind": "message", "query": "zephyrine quokka ledger"}
    )
    assert found.json()["memories"] == []
    assert api.get(f"/v1/bots/{BOT}/memories/mem:{one_of_hers}").status_code == 404
    export = api.get(f"/v1/bots/{BOT}/export", timeout=120).text
    # she is named only by her forget, which the export carries (ids, no words) once it is recorded
    lines = [line for line in export.splitlines() if '"kind": "forgotten"' not in line]
    assert "zephyrine" not in export and '"alice"' not in "\n".join(lines)


def left_in_tables(stack: Stack) -> tuple[int, int]:
    """Alice's records and the forgets under way, read from DynamoDB itself."""
    client = stack.client("dynamodb")
    pages = client.get_paginator("query").paginate(  # the user index, keys only: a page is 1 MB of them
        TableName="engram-memories",
        IndexName="byUser",
        Select="COUNT",
        KeyConditionExpression="botUser = :u",
        ExpressionAttributeValues={":u": {"S": f"{BOT}#alice"}},
    )
    records = sum(page["Count"] for page in pages)
    under_way = client.query(
        TableName="engram-state",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": f"forgetting#{BOT}"}},
    )["Count"]
    return records, under_way


def test_a_forget_killed_at_every_step_hides_the_user_and_finishes_by_itself(tmp_path):
    env = {
        "ENGRAM_EMBEDDER": "off",  # words only: 20,000 points in seconds, the same index and forget
        "ENGRAM_DYNAMODB_PORT": str(free_port()),
        "ENGRAM_SQS_PORT": str(free_port()),
    }
    stack = start(tmp_path, env)
    try:
        imported = stack.api.post(
            f"/v1/bots/{BOT}/import",
            content=lines(),
            headers={"content-type": "application/x-ndjson"},
            # 20,040 records with their claims through dynalite: ~5 min here idle, past 10 min in CI beside
            # the other tiers since the claims gained the byOwner index (to be measured and brought down)
            timeout=1800,
        )
        assert imported.status_code == 200, imported.text
        stack.settle(timeout_s=600)
        hers = stack.api.get(f"/v1/bots/{BOT}/memories", params={"kind": "message", "userId": "alice"})
        one_of_hers = int(hers.json()["memories"][0]["id"].split(":")[1])
        assert stack.api.get(
            f"/v1/bots/{BOT}/memories", params={"kind": "message", "query": "zephyrine"}
        ).json()["memories"]
        assert left_in_tables(stack) == (RECORDS, 0)  # what the last start must bring to (0, 0)
    finally:
        stack.stop()

    answers: list[httpx.Response | Exception] = []
    for n, step in enumerate(STEPS):
        stack = start(tmp_path, env, freeze=step)
        try:
            if n == 0:  # the forget itself, asked over HTTP; it never answers: frozen, then killed

                def ask(stack: Stack = stack) -> None:
                    try:
                        answers.append(stack.api.delete(f"/v1/bots/{BOT}/users/alice/memories", timeout=300))
                    except Exception as exc:
                        answers.append(exc)

                threading.Thread(target=ask, daemon=True).start()
            assert wait_until(lambda step=step: frozen(tmp_path, step), timeout_s=300, every_s=0.2), (
                f"never reached {step}\n{stack.read_log()[-3000:]}"
            )
            nothing_of_alice(stack, one_of_hers)
        finally:
            stack.kill()
        (tmp_path / "frozen").unlink()
    assert answers and isinstance(answers[0], Exception)  # killed before it could answer

    stack = start(tmp_path, env)  # no freeze: the start resumes the forget, and it finishes
    try:
        assert wait_until(lambda: left_in_tables(stack) == (0, 0), timeout_s=300, every_s=1), left_in_tables(
            stack
        )
        nothing_of_alice(stack, one_of_hers)
        bobs = stack.api.get(f"/v1/bots/{BOT}/memories", params={"kind": "message", "userId": "bob"})
        assert len(bobs.json()["memories"]) == RECORDS // EVERY_BOB  # Bob's own words stay
        export = stack.api.get(f"/v1/bots/{BOT}/export").text.splitlines()
        forgets = [line for line in export if '"kind": "forgotten"' in line]
        export = [line for line in export if line not in forgets]
        assert len(forgets) == 1 and '"userId": "alice"' in forgets[0]  # her forget travels with the export
        assert len(export) == RECORDS // EVERY_BOB and all('"context"' not in line for line in export)
    finally:
        stack.stop()
