"""The gateway process's batcher (engram.discord.gateway): which dispatches reach the queue, noted with what
the worker cannot look up, in jobs SQS accepts."""

from engram.discord.gateway import BATCH_EVENTS, ConsentCache, EventBatcher
from engram.jobs import GatewayJob, parse_job

APP = "900"


def dispatch(event, data):
    return {"op": 0, "t": event, "s": 1, "d": data}


def message(mid, author, channel="c1", **extra):
    return {
        "id": mid,
        "channel_id": channel,
        "guild_id": "g1",
        "author": {"id": author},
        "content": "hi",
        **extra,
    }


def batcher(opted_in=("alice",), asked=None):
    def consenting(users):
        if asked is not None:
            asked.append(set(users))
        return set(users) & set(opted_in)

    return EventBatcher(APP, ConsentCache(consenting))


def test_only_messages_of_people_who_opted_in_and_every_deletion_are_forwarded():
    b = batcher()
    b.add(dispatch("MESSAGE_CREATE", message("1", "alice")))
    b.add(dispatch("MESSAGE_CREATE", message("2", "dora")))
    b.add(dispatch("MESSAGE_CREATE", {**message("3", "otherbot"), "author": {"id": "otherbot", "bot": True}}))
    b.add(dispatch("MESSAGE_DELETE", {"id": "4", "channel_id": "c1", "guild_id": "g1"}))
    b.add(dispatch("MESSAGE_DELETE_BULK", {"ids": ["5", "6"], "channel_id": "c1"}))
    b.add(dispatch("GUILD_DELETE", {"id": "g2", "unavailable": True}))  # an outage, not a removal
    b.add(dispatch("GUILD_DELETE", {"id": "g3"}))
    b.add({"op": 11, "d": None})  # a heartbeat ACK: not a dispatch
    [job] = b.take()
    assert [(e["t"], e["d"].get("id")) for e in job.events] == [
        ("MESSAGE_CREATE", "1"),
        ("MESSAGE_DELETE", "4"),
        ("MESSAGE_DELETE_BULK", None),
        ("GUILD_DELETE", "g3"),
    ]
    assert b.take() == []


def test_the_bots_command_answers_stay_with_ask_and_its_replies_follow_whom_they_answer():
    b = batcher()
    answer = message("1", APP, interaction_metadata={"id": "i", "type": 2, "user": {"id": "alice"}})
    reply = message("2", APP, referenced_message={"id": "0", "author": {"id": "alice"}})
    b.add(dispatch("MESSAGE_CREATE", answer))
    b.add(dispatch("MESSAGE_CREATE", reply))
    [job] = b.take()
    assert [e["d"]["id"] for e in job.events] == ["2"]


def test_a_threads_message_carries_its_parent_and_privacy_learnt_from_guild_create_and_thread_create():
    b = batcher()
    b.add(
        dispatch(
            "GUILD_CREATE",
            {
                "id": "g1",
                "channels": [{"id": "c1", "type": 0}],
                "threads": [{"id": "t1", "type": 11, "parent_id": "c1"}],
            },
        )
    )
    b.add(dispatch("THREAD_CREATE", {"id": "t2", "type": 12, "parent_id": "c1"}))
    b.add(dispatch("MESSAGE_CREATE", message("1", "alice", channel="t1")))
    b.add(dispatch("MESSAGE_CREATE", message("2", "alice", channel="t2")))
    b.add(dispatch("MESSAGE_CREATE", message("3", "alice", channel="c1")))
    [job] = b.take()
    notes = [(e.get("parent_id"), e.get("private")) for e in job.events]
    assert notes == [("c1", False), ("c1", True), (None, None)]


def test_consent_is_asked_once_a_minute_per_person_and_jobs_stay_small_enough_for_sqs():
    asked = []
    b = batcher(asked=asked)
    for i in range(BATCH_EVENTS * 2 + 1):
        b.add(dispatch("MESSAGE_CREATE", message(str(i), "alice")))
    jobs = b.take()
    assert [len(j.events) for j in jobs] == [BATCH_EVENTS, BATCH_EVENTS, 1]
    b.add(dispatch("MESSAGE_CREATE", message("x", "alice")))
    b.take()
    assert asked == [{"alice"}]  # the second take reused the answer
    body = jobs[0].model_dump_json()
    assert len(body) < 256 * 1024 and isinstance(parse_job(body), GatewayJob)
