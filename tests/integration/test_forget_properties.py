"""Forgetting under random interleavings (hypothesis): writes asked for at some moment and run at a later
one (a queued job, a retry, a redrive), forgets in between, chat messages that quote each other, deletes.
Every write asked for before its user's last forget is refused, and every one after it is stored; after
the program nothing written before a user's last forget is left in DynamoDB — not as their records, not in
anyone's context, not in a thread tail or a claim."""

from __future__ import annotations

import contextlib
import json
import os
import uuid

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

import engram.forgetting
import engram.record
import engram.store.claims
import engram.store.records
import engram.writes
from engram.errors import Forgotten
from engram.service import ChatMessage

USERS = ["u1", "u2", "u3"]
# ("write", user, kind, how many steps ago it was asked for) | ("forget", user) | ("remove", nth write)
write = st.tuples(
    st.just("write"), st.sampled_from(USERS), st.sampled_from(["fact", "message"]), st.integers(0, 3)
)
forget = st.tuples(st.just("forget"), st.sampled_from(USERS))
remove = st.tuples(st.just("remove"), st.integers(0, 10))
program = st.lists(st.one_of(write, write, write, forget, remove), min_size=3, max_size=16)


# How hard the search is: 10 programs by default, FORGET_EXAMPLES in CI (.ci/run); every run starts from
# an empty example database with the run's seed (tests/conftest.py says it at the end of the run), so a
# counterexample found in CI is found again with FORGET_SEED, and one never found only by luck passes unseen
EXAMPLES = int(os.environ.get("FORGET_EXAMPLES") or 10)
SEED = int(os.environ["FORGET_SEED"])


@pytest.mark.timeout(300 + 4 * EXAMPLES)  # a program takes about a second; the tier's 300 s is for 10
@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=program)
# Hypothesis's counterexample of the last wave: u1's word of step 1 ("canary…1") was the start of the word
# of step 12, a message rightly kept, so a substring check saw her in it; words now have a fixed width
@example(
    steps=[("write", "u2", "fact", 0), ("write", "u1", "message", 0), ("forget", "u1")]
    + [("write", "u2", "message", 0)] * 10
)
# a forgotten user's words as the context of the next message in the thread, and of one asked for before
# her forget but run after it
@example(
    steps=[
        ("write", "u1", "message", 0),
        ("write", "u2", "message", 0),
        ("write", "u1", "message", 0),
        ("forget", "u1"),
        ("write", "u2", "message", 2),
        ("write", "u3", "fact", 1),
        ("remove", 0),
    ]
)
def test_nothing_asked_for_before_a_forget_is_stored_after_it(service, aws, monkeypatch, steps):
    run = uuid.uuid4().hex[:6]
    bot = f"b-{run}"
    clock = {"now": 10_000_000}
    monkeypatch.setattr(engram.forgetting, "now_ms", lambda: clock["now"])
    # records keep when they were received on the same clock: a forget deletes what arrived before it
    for module in (engram.record, engram.store.records, engram.store.claims):
        monkeypatch.setattr(module, "now_ms", lambda: clock["now"])
    last_forget: dict[str, int] = {}
    written: list[tuple[str, int, str, int]] = []  # (user, asked at, word, memory id)
    for n, step in enumerate(steps):
        clock["now"] += 1000
        if step[0] == "forget":
            # a front door's forget stops after 8 s and leaves the rest to a job (on a loaded machine it
            # does): run that rest here as the job would, at the same forget time
            while service.forget_user(bot, step[1], at=clock["now"])["left"]:
                pass
            last_forget[step[1]] = clock["now"]
        elif step[0] == "remove":
            if written:
                user, asked, word, memory_id = written.pop(step[1] % len(written))
                with contextlib.suppress(Exception):
                    service.remove(bot, memory_id)
        else:
            _, user, kind, ago = step
            asked = clock["now"] - ago * 1000
            # fixed width: a word must not be a prefix of a later one (canary…1 inside canary…12)
            word = f"canary{run}{n:04d}"
            try:
                if kind == "fact":
                    memory, _ = service.add_fact(bot, f"Note {word} from {user}.", user=user, origin=asked)
                    ids = [memory.id]
                else:
                    added = service.add_messages(
                        bot,
                        [
                            ChatMessage(
                                source_id=f"{run}-{n}",
                                text=f"say {word}",
                                user=user,
                                thread="t",
                                created_at=clock["now"],
                            )
                        ],
                        origin=asked,
                    )
                    memories = added.memories
                    ids = [m.id for m in memories]
            except Forgotten:
                ids = []
            refused = user in last_forget and last_forget[user] >= asked
            assert bool(ids) != refused, (step, last_forget)
            written += [(user, asked, word, i) for i in ids]
    # nothing from before a user's last forget, anywhere in either store
    tables = {table: everything(aws["dynamodb"], table) for table in ("t-memories", "t-state")}
    items = json.dumps(list(tables.values()))
    for user, asked, word, _ in written:
        if user in last_forget and asked <= last_forget[user]:
            assert word not in items
    # the next program starts from empty tables: each one's reads cost what it wrote, not what all before
    # it wrote (a scan of everything grew with every program, and 200 of them outlived the tier's timeout)
    for table, found in tables.items():
        schema = aws["dynamodb"].describe_table(TableName=table)["Table"]["KeySchema"]
        keys = [{k["AttributeName"]: item[k["AttributeName"]] for k in schema} for item in found]
        for at in range(0, len(keys), 25):
            batch = [{"DeleteRequest": {"Key": key}} for key in keys[at : at + 25]]
            aws["dynamodb"].batch_write_item(RequestItems={table: batch})


def everything(dynamodb, table: str) -> list[dict]:
    """Every item of a table (scanned page by page)."""
    pages = dynamodb.get_paginator("scan").paginate(TableName=table)
    return [item for page in pages for item in page["Items"]]
