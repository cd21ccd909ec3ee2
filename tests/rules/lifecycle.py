"""A memory's life after it is written (engram.lifecycle): metadata and expiry kept and changed, listings
and searches narrowed by metadata, what expired hidden at once and deleted by the sweep's page.

Imported where `service` is given: tests/unit (in-memory stores, embedded index) and tests/integration
(DynamoDB under moto)."""

import pytest

from engram.clock import now_ms
from engram.domain import Terms
from engram.errors import InvalidInput, NotFound


def texts(found) -> list[str]:
    return [m.text for m in found]


def test_metadata_narrows_a_listing_and_a_search_and_a_change_replaces_it(service):
    tagged, _ = service.add_fact(
        "b", "Ravi likes oolong tea.", user="u", terms=Terms({"source": "crm", "n": 3})
    )
    service.add_fact("b", "Ravi likes green tea too.", user="u", terms=Terms({"source": "chat"}))
    assert texts(service.list("b", metadata={"source": "crm"})) == ["Ravi likes oolong tea."]
    assert texts(service.list("b", metadata={"n": "3.0"})) == ["Ravi likes oolong tea."]  # a number, as text
    assert texts(service.search("b", "tea", metadata={"source": "chat"})) == ["Ravi likes green tea too."]
    changed = service.relabel("b", tagged.id, Terms({"source": "sales"}))
    assert changed.metadata == {"source": "sales"} and service.get("b", tagged.id).metadata == {
        "source": "sales"
    }
    assert texts(service.list("b", metadata={"source": "crm"})) == []
    assert texts(service.search("b", "oolong", metadata={"source": "sales"})) == ["Ravi likes oolong tea."]


def test_a_metadata_filter_that_reads_its_bound_says_where_to_page_on(service, monkeypatch):
    import engram.reads

    monkeypatch.setattr(engram.reads, "FILTERED_READ", 4)
    service.add_fact("b", "The one labelled fact.", terms=Terms({"pick": True}))
    others = ("Oslo is cold.", "Cats purr.", "Rust has lifetimes.", "Jazz swings.", "Tides follow the moon.")
    for text in others:
        service.add_fact("b", text)
    first = service.list("b", limit=2, metadata={"pick": "true"})
    assert texts(first) == [] and first.read_to is not None
    rest = service.list("b", limit=2, before=first.read_to, metadata={"pick": "true"})
    assert texts(rest) == ["The one labelled fact."]


def test_an_expired_memory_is_hidden_at_once_and_the_sweep_deletes_only_what_came_due(service):
    now = now_ms()
    soon, _ = service.add_fact("b", "Parking is on level 3 today.", terms=Terms(expires_at=now + 60_000))
    later, _ = service.add_fact("b", "The lease ends in June.", terms=Terms(expires_at=now + 3_600_000))
    moved, _ = service.add_fact("b", "The spare key is under the mat.", terms=Terms(expires_at=now + 60_000))
    service.relabel("b", moved.id, Terms(expires_at=now + 7_200_000))  # given longer before it came due
    assert service.expire("b", now=now + 120_000) == 1  # what came due; the one given longer stays
    assert service.records.get("b", soon.id) is None
    assert {r.id for r in [service.records.get("b", later.id), service.records.get("b", moved.id)] if r} == {
        later.id,
        moved.id,
    }
    assert service.expire("b", now=now + 120_000) == 0  # its entry went with it: nothing read again


def test_terms_that_are_not_flat_small_or_ahead_are_refused(service):
    for terms in (Terms({"a": {"b": 1}}), Terms({"a": "x" * 5000}), Terms(expires_at=now_ms() - 1)):
        with pytest.raises(InvalidInput):
            service.add_fact("b", "A fact with bad terms.", terms=terms)
    assert service.list("b") == []


def test_a_change_keeps_the_old_text_as_a_version_and_an_edit_at_the_source_withholds_it(service):
    from engram.service import ChatMessage

    fact, _ = service.add_fact("b", "Mia lives in Berlin.", user="u")
    service.update("b", fact.id, "Mia lives in Munich.")
    service.update("b", fact.id, "Mia lives in Hamburg.", by="mcp")
    history = service.history("b", fact.id)
    assert [(v.text, v.by) for v in history] == [
        ("Mia lives in Munich.", "mcp"),
        ("Mia lives in Berlin.", "api"),
    ]
    assert history[0].at >= history[1].at > 0
    # a chat message edited where it was written: the change is noted, its withdrawn words are not kept
    added = service.add_messages(
        "b", [ChatMessage(source_id="m1", text="my pin is 4417", user="u", thread="t")]
    )
    service.edit_message("b", added.memories[0].id, "my pin is (removed)", None)
    assert [(v.text, v.by) for v in service.history("b", added.memories[0].id)] == [(None, "source")]
    # a forget takes the history with the memory
    service.forget_user("b", "u")
    with pytest.raises(NotFound):
        service.history("b", fact.id)


def test_versions_keep_the_newest_ten(service):
    fact, _ = service.add_fact("b", "Counter at 0.", user="u")
    for n in range(1, 14):
        service.update("b", fact.id, f"Counter at {n}.")
    texts_then = [v.text for v in service.history("b", fact.id)]
    assert texts_then == [f"Counter at {n}." for n in range(12, 2, -1)]


def test_the_same_text_after_its_memory_expired_is_a_new_memory(service, monkeypatch):
    import engram.writes

    first, _ = service.add_fact("b", "Gate B12 for the flight.", terms=Terms(expires_at=now_ms() + 60_000))
    later = now_ms() + 120_000
    monkeypatch.setattr(engram.writes, "now_ms", lambda: later)
    again, created = service.add_fact("b", "Gate B12 for the flight.")
    assert created and again.id != first.id and service.records.get("b", first.id) is None
