"""The local queue journal (SQLite) keeps no bytes of a forgotten user's jobs: deleted rows are overwritten
(secure_delete) and the WAL that wrote them is checkpointed and truncated by a forget."""

from __future__ import annotations

import json

from infra.queue_journal import QueueJournal

CANARY = "canary-quetzal-7719"


def raw_bytes(path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_a_forgotten_users_job_bodies_leave_the_files(tmp_path):
    path = tmp_path / "journal.sqlite"
    journal = QueueJournal(path)
    url = "http://sqs.local/000000000000/engram-jobs"
    journal.add(
        url, "m-1", json.dumps({"kind": "extract", "bot": "librechat", "user": "ana", "text": CANARY})
    )
    journal.add(
        url, "m-2", json.dumps({"kind": "extract", "bot": "librechat", "user": "bo", "text": "hello"})
    )
    journal.add(
        url, "m-3", json.dumps({"kind": "extract", "bot": "librechat", "user": "ana", "text": CANARY})
    )
    journal.remove(["m-3"])  # a job that ran: its row deleted the ordinary way
    assert CANARY.encode() in raw_bytes(path)
    assert journal.forget_user("ana", "librechat") == 1
    assert CANARY.encode() not in raw_bytes(path)
    assert len(journal) == 1
    journal.close()
