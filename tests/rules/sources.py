"""What the source deleted leaves memory: a thread's messages, a server's memories, what aged out, each
removed as a single delete removes one (vectors, contexts that quoted it), a bounded page at a time.

Imported where `service` is given: tests/unit (in-memory stores, embedded index) and tests/integration
(DynamoDB under moto)."""

from engram.clock import now_ms
from engram.service import ChatMessage
from engram.vectors import Scope

DAY = 86_400_000


def message(
    source: str, text: str, thread: str = "t1", server: str = "s1", user: str = "u1", age_days: int = 0
):
    return ChatMessage(
        source_id=source,
        text=text,
        user=user,
        server=server,
        thread=thread,
        created_at=now_ms() - age_days * DAY,
        content={"channelId": thread, "serverId": server},
    )


def texts(service, bot="b") -> set[str]:
    return {m.text for m in service.list(bot, kind="message", limit=500)}


def test_a_deleted_thread_takes_its_messages_and_leaves_the_rest(service):
    service.add_messages("b", [message(f"m{i}", f"thread one line {i}") for i in range(5)])
    service.add_messages("b", [message("x1", "another thread's words", thread="t2")])
    assert service.remove_thread("b", "t1", limit=3) == 3  # a page at a time
    assert service.remove_thread("b", "t1", limit=3) == 2
    assert service.remove_thread("b", "t1", limit=3) == 0
    assert texts(service) == {"another thread's words"}
    assert service.index.count(Scope(bot="b", kind="message", server="s1")) == 1


def test_a_deleted_message_leaves_the_context_of_the_one_after_it(service):
    service.add_messages("b", [message("m1", "the first turn says pelican"), message("m2", "the reply")])
    first = service.by_source("b", "m1")
    assert service.by_source("b", "m2").id != first.id
    assert service.remove_ids("b", [first.id, 424242]) == 1  # one that is not there is no error
    assert service.by_source("b", "m1") is None
    assert "pelican" not in (service.get("b", service.by_source("b", "m2").id).content or {}).get(
        "context", ""
    )
    assert all("pelican" not in m.text for m in service.search("b", "pelican", kind="message"))


def test_a_left_servers_memories_go_and_another_servers_stay(service):
    service.add_messages("b", [message(f"m{i}", f"server one {i}") for i in range(4)])
    service.add_messages("b", [message("o1", "server two stays", server="s2", thread="t9")])
    service.add_fact("b", "A fact said in server one.", server="s1")
    while service.remove_server("b", "s1", limit=2):
        pass
    assert texts(service) == {"server two stays"}
    assert [m.text for m in service.list("b", kind="fact")] == []


def test_what_aged_out_goes_by_when_it_was_written_page_by_page(service):
    service.add_messages("b", [message(f"old{i}", f"old words {i}", age_days=60) for i in range(3)])
    service.add_messages("b", [message("new", "new words", age_days=1)])
    cutoff = now_ms() - 45 * DAY
    assert service.remove_thread("b", "t1", limit=200, written_before=cutoff) == 3
    assert texts(service) == {"new words"}
    removed, more = service.remove_aged("b", "message", cutoff, limit=200)
    assert (removed, more) == (0, False)  # nothing left that old, and the oldest page was received now


def test_messages_by_their_source_ids(service):
    service.add_messages("b", [message("m1", "one"), message("m2", "two")])
    found = service.by_sources("b", ["m1", "m2", "nope"])
    assert sorted(found) == ["m1", "m2"] and found["m1"].text == "one"
    assert service.by_sources("b", []) == {}
