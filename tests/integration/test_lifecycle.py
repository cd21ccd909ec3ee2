"""Memories that live and change (issue 45), through the Memory API of a local stack: the caller's metadata
stored, shown, changed and filtered on by list and search; an expiry past which nothing shows a memory
and the sweep deletes it; both carried by export and import."""

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.support import wait_until


@pytest.fixture
def bot():
    return f"life-{uuid.uuid4().hex[:8]}"


def iso_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def add(api, bot, text, **fields):
    r = api.post(f"/v1/bots/{bot}/memories", json={"text": text, "userId": "u1", **fields})
    assert r.status_code == 201, r.text
    return r.json()


def texts(api, bot, **params) -> list[str]:
    r = api.get(f"/v1/bots/{bot}/memories", params=params)
    assert r.status_code == 200, r.text
    return [m["text"] for m in r.json()["memories"]]


def test_metadata_is_kept_shown_and_filters_list_and_search(api, bot):
    crm = add(
        api, bot, "Dana prefers calls after lunch.", metadata={"source": "crm", "priority": 2, "vip": True}
    )
    add(api, bot, "Dana asked about the lunch menu.", metadata={"source": "chat", "priority": 1})
    add(api, bot, "Dana's lunch is at noon.")
    assert api.get(f"/v1/bots/{bot}/memories/{crm['id']}").json()["metadata"] == {
        "source": "crm",
        "priority": 2,
        "vip": True,
    }
    assert texts(api, bot, **{"metadata.source": "crm"}) == ["Dana prefers calls after lunch."]
    assert texts(api, bot, **{"metadata.priority": "2"}) == ["Dana prefers calls after lunch."]
    assert texts(api, bot, **{"metadata.vip": "true"}) == ["Dana prefers calls after lunch."]
    assert texts(api, bot, **{"metadata.source": "chat", "metadata.priority": "2"}) == []  # all must hold
    assert len(texts(api, bot, query="lunch")) == 3
    assert texts(api, bot, query="lunch", **{"metadata.source": "crm"}) == ["Dana prefers calls after lunch."]
    assert texts(api, bot, query="lunch", **{"metadata.source": "nowhere"}) == []

    # a change replaces the metadata whole; null removes it; the text stays
    changed = api.patch(f"/v1/bots/{bot}/memories/{crm['id']}", json={"metadata": {"source": "sales"}}).json()
    assert changed["metadata"] == {"source": "sales"} and changed["text"] == crm["text"]
    assert texts(api, bot, query="calls", **{"metadata.source": "sales"}) == [
        "Dana prefers calls after lunch."
    ]
    assert texts(api, bot, query="calls", **{"metadata.source": "crm"}) == []
    cleared = api.patch(f"/v1/bots/{bot}/memories/{crm['id']}", json={"metadata": None}).json()
    assert "metadata" not in cleared or cleared["metadata"] is None


@pytest.mark.parametrize(
    "metadata",
    [
        {"nested": {"a": 1}},
        {"list": [1, 2]},
        {"bad key!": "x"},
        {"big": "x" * 5000},
        {"nul": None},
        "not an object",
    ],
)
def test_metadata_that_is_not_flat_small_and_named_plainly_is_a_400_and_stores_nothing(api, bot, metadata):
    r = api.post(f"/v1/bots/{bot}/memories", json={"text": "A fact with odd labels.", "metadata": metadata})
    assert r.status_code in (400, 422), r.text
    assert texts(api, bot) == []


def test_a_filter_on_a_key_metadata_cannot_have_is_a_400(api, bot):
    assert api.get(f"/v1/bots/{bot}/memories", params={"metadata.bad key": "x"}).status_code == 400


def test_an_expired_memory_is_neither_listed_searched_nor_exported_and_the_sweep_deletes_it(api, bot, stack):
    soon = add(api, bot, "The door code this week is 7731.", expiresAt=iso_in(3))
    add(api, bot, "The door code changes every week.")
    assert soon["expiresAt"]
    assert "The door code this week is 7731." in texts(api, bot)
    assert "The door code this week is 7731." in texts(api, bot, query="door code")
    time.sleep(3.5)
    assert texts(api, bot) == ["The door code changes every week."]
    assert texts(api, bot, query="door code 7731") == ["The door code changes every week."]
    assert "7731" not in api.get(f"/v1/bots/{bot}/export").text
    assert api.get(f"/v1/bots/{bot}/memories/{soon['id']}").status_code == 404
    # the sweep (every second here) deletes its record and its point, as a delete would
    memory_id = int(soon["id"].removeprefix("mem:"))
    assert wait_until(lambda: stack.engine.service.records.get(bot, memory_id) is None, timeout_s=20)


def test_an_expiry_is_changed_or_removed_and_one_in_the_past_is_a_400(api, bot):
    assert (
        api.post(
            f"/v1/bots/{bot}/memories", json={"text": "Already over.", "expiresAt": iso_in(-60)}
        ).status_code
        == 400
    )
    short = add(api, bot, "I'm in Lisbon this week.", expiresAt=iso_in(2))
    kept = api.patch(f"/v1/bots/{bot}/memories/{short['id']}", json={"expiresAt": None}).json()
    assert kept.get("expiresAt") is None
    time.sleep(2.5)
    assert texts(api, bot) == ["I'm in Lisbon this week."]
    later = api.patch(f"/v1/bots/{bot}/memories/{short['id']}", json={"expiresAt": iso_in(3600)}).json()
    assert later["expiresAt"] and later["text"] == "I'm in Lisbon this week."
    assert api.patch(f"/v1/bots/{bot}/memories/{short['id']}", json={}).status_code == 400


def test_export_and_import_carry_metadata_and_expiry_and_refuse_a_line_already_expired(api, bot):
    add(api, bot, "The quarterly report is due Friday.", metadata={"source": "crm"}, expiresAt=iso_in(3600))
    exported = [json.loads(line) for line in api.get(f"/v1/bots/{bot}/export").text.splitlines()]
    assert exported[0]["metadata"] == {"source": "crm"} and exported[0]["expiresAt"]
    other = f"{bot}-copy"
    gone = {"kind": "fact", "text": "An offer that ended.", "expiresAt": iso_in(-5)}
    body = "\n".join(json.dumps(line) for line in [*exported, gone])
    result = api.post(f"/v1/bots/{other}/import", content=body).json()
    assert result["facts"]["created"] == 1 and [e["line"] for e in result["errors"]] == [2]
    copied = api.get(f"/v1/bots/{other}/memories", params={"metadata.source": "crm"}).json()["memories"]
    assert [m["text"] for m in copied] == ["The quarterly report is due Friday."]
    assert copied[0]["expiresAt"] == exported[0]["expiresAt"]


def test_a_patch_keeps_the_old_text_in_history_export_carries_it_and_a_forget_takes_it(api, bot):
    fact = add(api, bot, "I live in Berlin.")
    assert api.get(f"/v1/bots/{bot}/memories/{fact['id']}/history").json() == {"history": []}
    assert (
        api.patch(f"/v1/bots/{bot}/memories/{fact['id']}", json={"text": "I live in Munich."}).status_code
        == 200
    )
    history = api.get(f"/v1/bots/{bot}/memories/{fact['id']}/history").json()["history"]
    assert [(v["text"], v["by"]) for v in history] == [("I live in Berlin.", "api")] and history[0]["at"]
    assert texts(api, bot, query="Berlin") == ["I live in Munich."]  # the old text is reached only here
    line = json.loads(api.get(f"/v1/bots/{bot}/export").text.splitlines()[0])
    assert [v["text"] for v in line["history"]] == ["I live in Berlin."]
    moved = f"{bot}-moved"
    assert api.post(f"/v1/bots/{moved}/import", content=json.dumps(line)).json()["facts"]["created"] == 1
    [copy] = api.get(f"/v1/bots/{moved}/memories").json()["memories"]
    assert api.get(f"/v1/bots/{moved}/memories/{copy['id']}/history").json()["history"] == history
    assert api.delete(f"/v1/bots/{bot}/users/u1/memories").status_code == 200
    assert api.get(f"/v1/bots/{bot}/memories/{fact['id']}/history").status_code == 404


def test_an_add_that_supersedes_rewrites_the_fact_it_names_and_keeps_the_old_in_history(api, bot):
    old = add(api, bot, "My office is on the 3rd floor.")
    r = api.post(
        f"/v1/bots/{bot}/memories",
        json={"text": "My office is on the 5th floor.", "userId": "u1", "supersedes": old["id"]},
    )
    assert r.status_code == 200 and r.json()["id"] == old["id"]
    assert texts(api, bot) == ["My office is on the 5th floor."]
    history = api.get(f"/v1/bots/{bot}/memories/{old['id']}/history").json()["history"]
    assert [v["text"] for v in history] == ["My office is on the 3rd floor."]
    other = api.post(
        f"/v1/bots/{bot}/memories", json={"text": "Not mine.", "userId": "u2", "supersedes": old["id"]}
    )
    assert other.status_code == 400 and texts(api, bot) == ["My office is on the 5th floor."]
    assert (
        api.post(f"/v1/bots/{bot}/memories", json={"text": "x", "supersedes": "mem:999999"}).status_code
        == 404
    )


TEA = ("I drink green tea.", "I love oolong tea in the afternoon.", "My favourite tea shop is in Kyoto.")


def searched(api, bot, query, **params) -> dict[str, float]:
    """Each found memory's text and score, once search has meaning (the model is warm)."""
    params = {"query": query, "userId": "u1", **params}
    out: dict = {}

    def found() -> bool:
        r = api.get(f"/v1/bots/{bot}/memories", params=params)
        assert r.status_code == 200, r.text
        out.update(r=r.json())
        return r.json()["meaning"]

    assert wait_until(found, timeout_s=30)
    return {m["text"]: m["score"] for m in out["r"]["memories"]}


def test_a_relevance_floor_keeps_what_is_related_and_nothing_of_an_unrelated_question(api, bot):
    for text in TEA:
        add(api, bot, text)
    assert searched(api, bot, "quantum physics lecture", minScore=0.5) == {}
    beverage = searched(api, bot, "favourite beverage", minScore=0.5)
    assert "I drink green tea." in beverage and all(0.5 <= s <= 1 for s in beverage.values())
    # without a floor the unrelated question is still answered, each memory scored low
    unrelated = searched(api, bot, "quantum physics lecture")
    assert set(unrelated) == set(TEA) and max(unrelated.values()) < 0.2


def test_a_score_means_the_same_whatever_else_the_scope_holds(api, bot):
    """A fused rank's score depends on the other hits; relevance is the memory's own: the same fact scores
    the same for a question whether 3 or 23 memories are searched."""
    for text in TEA:
        add(api, bot, text)
    alone = searched(api, bot, "favourite beverage")["I drink green tea."]
    for n in range(20):
        add(api, bot, f"Note {n}: the meeting room {n} has a projector and a whiteboard.")
    crowded = searched(api, bot, "favourite beverage")["I drink green tea."]
    assert crowded == pytest.approx(alone, abs=1e-6)


@pytest.mark.parametrize("value", ["1.5", "-0.1", "high"])
def test_a_min_score_outside_0_to_1_is_a_400(api, bot, value):
    r = api.get(f"/v1/bots/{bot}/memories", params={"query": "tea", "minScore": value})
    assert r.status_code == 400 and "minScore" in r.text
