"""The read rules (engram.reads) on the in-memory stores and the embedded index: listing, getting, searching,
recalling in a scope and what a forget under way hides from each."""

from __future__ import annotations

import pytest

from engram.clock import now_ms
from engram.domain import Memory
from engram.errors import IndexUnavailable, InvalidInput, NotFound
from engram.service import ChatMessage
from engram.vectors import Scope


def _ids(memories: list[Memory]) -> list[int]:
    return [m.id for m in memories]


def test_get_answers_the_memory_and_not_found_for_another_bot_s_id(service):
    memory, _ = service.add_fact("b", "Keeps bees.")
    assert service.get("b", memory.id).text == "Keeps bees."
    with pytest.raises(NotFound):
        service.get("other", memory.id)
    with pytest.raises(NotFound):
        service.get("b", memory.id + 1)


def test_a_message_is_found_by_its_source_id_and_nothing_else_is(service):
    added = service.add_messages("b", [ChatMessage(source_id="d-1", text="Hello there.", user="u")])
    assert service.by_source("b", "d-1").id == added.memories[0].id
    assert service.by_source("b", "d-2") is None
    assert service.by_source("other", "d-1") is None


def test_listing_pages_on_below_the_last_id_it_showed(service):
    made = [service.add_fact("b", f"Fact {n}.")[0] for n in range(7)]
    first = service.list("b", limit=3)
    assert _ids(first) == _ids(made[::-1][:3])
    second = service.list("b", limit=3, before=first[-1].id)
    assert _ids(second) == _ids(made[::-1][3:6])
    assert _ids(service.list("b", limit=3, before=second[-1].id)) == [made[0].id]


def test_listing_narrows_by_kind_user_server_and_project(service):
    a, _ = service.add_fact("b", "Alice in s1.", user="alice", server="s1")
    b, _ = service.add_fact("b", "Bob in s1.", user="bob", server="s1")
    c, _ = service.add_fact("b", "Alice in p1.", user="alice", project="p1")
    service.add_messages("b", [ChatMessage(source_id="m", text="A message.", server="s1")])
    assert _ids(service.list("b", server="s1")) == [b.id, a.id]
    assert _ids(service.list("b", user="alice")) == [c.id, a.id]
    assert _ids(service.list("b", project="p1")) == [c.id]
    assert [m.text for m in service.list("b", kind="message")] == ["A message."]


@pytest.mark.parametrize("kind", ["facts", "", "memory"])
def test_an_unknown_kind_is_refused(service, kind):
    with pytest.raises(InvalidInput):
        service.list("b", kind=kind)


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_query_is_refused(service, query):
    with pytest.raises(InvalidInput):
        service.search("b", query)


def test_recall_stays_inside_its_scope(service):
    mine, _ = service.add_fact("b", "Alice plays the cello.", user="alice", server="s1")
    service.add_fact("b", "Bob plays the cello.", user="bob", server="s1")
    service.add_fact("b", "Alice plays the cello elsewhere.", user="alice", server="s2")
    service.add_fact("other", "Alice plays the cello.", user="alice", server="s1")
    found = service.recall(Scope(bot="b", kind="fact", server="s1", user="alice"), "cello", 10)
    assert _ids(found) == [mine.id]


def test_search_answers_by_words_alone_while_the_embedder_is_down(service, embedder):
    tea, _ = service.add_fact("b", "The owner drinks green tea.")
    embedder.down = True
    found = service.search("b", "green tea")
    assert _ids(found) == [tea.id] and not found.meaning


def test_a_search_before_any_vector_is_stored_says_meaning_is_on_when_the_model_is(service, embedder):
    """An empty index has nothing to find by meaning, but a client waiting for `meaning` to learn that the
    model is ready must not wait for ever (it did until 1.12: meaning was false until a vector was stored)."""
    found = service.search("b", "green tea")
    assert list(found) == [] and found.meaning
    embedder.down = True
    assert not service.search("b", "green tea").meaning
    embedder.down = False
    tea, _ = service.add_fact("b", "The owner drinks green tea.")
    found = service.search("b", "a hot beverage")
    assert found.meaning and _ids(found) == [tea.id]


def test_search_answers_by_the_records_words_while_the_index_is_down(service, engine):
    tea, _ = service.add_fact("b", "The owner drinks green tea.")
    service.add_fact("b", "The owner's car is red.")
    engine.service.index.down = True
    found = service.search("b", "green tea")
    assert _ids(found)[:1] == [tea.id] and not found.meaning


def test_with_the_index_down_a_question_naming_someone_still_finds_their_words_first(service, engine):
    """The words fallback reads a record as the index does (its author's name before its text) and favours
    the authors a question names, and "my" the asker: the same person is found with Qdrant down."""
    from engram.service import ChatMessage

    said = [
        ChatMessage(
            source_id="1", text="my kiln is fixed", user="81234567", content={"displayName": "Melanie"}
        ),
        ChatMessage(source_id="2", text="the kiln is fixed, my pots are next", user="99887766"),
    ]
    mel, other = (m.id for m in service.add_messages("b", said).memories)
    engine.service.index.down = True
    assert _ids(service.search("b", "Is Melanie's kiln fixed?", kind="message"))[:1] == [mel]
    assert _ids(service.recall(Scope(bot="b", kind="message"), "is my kiln fixed", 2, asker="99887766"))[
        :1
    ] == [other]
    assert _ids(service.recall(Scope(bot="b", kind="message"), "is my kiln fixed", 2, asker="81234567"))[
        :1
    ] == [mel]


def test_with_the_index_down_a_question_naming_a_day_still_finds_that_day_s_memories(service, engine):
    """The words fallback asks the days a question names as a search of the index does: yesterday's memory
    first and kept over a floor, though it shares one word of the question at most."""
    day = 86_400_000
    said = [
        ChatMessage(source_id="1", text="We agreed the launch moves to March.", created_at=now_ms() - day),
        ChatMessage(source_id="2", text="We agreed on blue for the logo.", created_at=now_ms() - 4 * day),
    ]
    launch, logo = _ids(service.add_messages("b", said).memories)
    engine.service.index.down = True
    found = service.search("b", "what did we agree yesterday?", kind="message")
    assert _ids(found)[:1] == [launch] and not found.meaning
    floored = service.search("b", "what did we decide yesterday?", kind="message", min_score=0.4)
    assert _ids(floored) == [launch]


def test_the_closest_memory_in_meaning_is_told_with_its_similarity(service, embedder):
    tea, _ = service.add_fact("b", "Drinks tea.")
    service.add_fact("b", "Walks the dog.")
    closest = service.similar(Scope(bot="b", kind="fact"), "a beverage")
    assert closest is not None and closest[0].id == tea.id and closest[1] > 0.5
    embedder.down = True
    assert service.similar(Scope(bot="b", kind="fact"), "a beverage") is None


def test_a_forget_under_way_hides_the_user_from_every_read_at_once(service, engine):
    for n in range(25):
        service.add_fact("b", f"Alice's secret number {n}.", user="alice")
    kept, _ = service.add_fact("b", "Bob's secret.", user="bob")
    added = service.add_messages(
        "b", [ChatMessage(source_id="a-1", text="Alice's secret message.", user="alice")]
    )
    engine.service.index.down = True  # the forget cannot delete points: it stays under way
    with pytest.raises(IndexUnavailable):
        service.forget_user("b", "alice")
    engine.service.index.down = False
    assert engine.state.tombstones.under_way("b").keys() == {"alice"}
    assert _ids(service.list("b")) == [kept.id]
    assert service.list("b", user="alice") == []
    assert _ids(service.search("b", "secret")) == [kept.id]
    assert service.by_source("b", "a-1") is None
    with pytest.raises(NotFound):
        service.get("b", added.memories[0].id)


def test_bots_are_every_bot_written_to(service):
    service.add_fact("b2", "x")
    service.add_fact("b1", "y")
    assert service.bots() == ["b1", "b2"]


def test_a_search_past_the_limit_is_refused_and_within_it_is_cut_there(service):
    for n in range(8):
        service.add_fact("b", f"Apple note {n}.", user=f"u{n}")
    assert len(service.search("b", "apple", limit=3)) == 3
    with pytest.raises(InvalidInput):
        service.search("b", "apple", limit=501)


class _OneDirection:
    """The fake embedder's vectors with one direction shared by all of them, as E5's are (every cosine ~0.8):
    plain cosines say nothing of relevance."""

    provider, model = "fake", "one-direction"

    def __init__(self):
        from tests.support import HashEmbedder

        self.inner = HashEmbedder()

    def embed(self, texts):
        return [[*(0.4 * x for x in v), 0.92] for v in self.inner.embed(texts)]


def test_a_model_with_one_direction_in_every_vector_still_keeps_unrelated_memories_under_a_floor(
    service, tmp_path
):
    """Its cosines are measured from the reference texts' means (engram.relevance.CENTRE_BELOW): a question
    about the memory scores over the floor, one about nothing it holds recalls nothing (taken plainly, every
    cosine is ~0.85 and both would pass)."""
    from engram.service import MemoryService
    from engram.store.in_memory import InMemoryRecords, InMemoryState
    from engram.vectors.edge import EdgeIndex

    embedder = _OneDirection()
    one = MemoryService(
        records=InMemoryRecords(),
        state=InMemoryState(),
        index=EdgeIndex(tmp_path / "one-direction"),
        embedder=embedder,
        queue=service.queue,
    )
    one.add_fact("b", "My sister grows orchids in her greenhouse.", user="u")
    one.add_fact("b", "The train to the office takes forty minutes.", user="u")
    plain = embedder.embed(["write a haiku about autumn", "My sister grows orchids in her greenhouse."])
    assert sum(a * b for a, b in zip(*plain, strict=True)) > 0.8  # taken plainly, unrelated texts look close
    related = one.search("b", "orchids greenhouse sister", min_score=0.4)
    assert [m.text for m in related] == ["My sister grows orchids in her greenhouse."] and related.meaning
    assert one.search("b", "write a haiku about autumn", min_score=0.4) == []
    one.index.close()


def test_a_model_with_one_direction_in_every_vector_tells_a_new_fact_from_one_kept(service, tmp_path):
    """What extraction's dedupe asks (MEMORY_DEDUPE_THRESHOLD, 0.82): the same fact again is close, another
    fact is not — taken plainly, every pair is ~0.85 and every new fact would be dropped as known."""
    from engram.service import MemoryService
    from engram.store.in_memory import InMemoryRecords, InMemoryState
    from engram.vectors import Scope
    from engram.vectors.edge import EdgeIndex

    one = MemoryService(
        records=InMemoryRecords(),
        state=InMemoryState(),
        index=EdgeIndex(tmp_path / "one-direction"),
        embedder=_OneDirection(),
        queue=service.queue,
    )
    one.add_fact("b", "The user's employer is Initech.", user="u")
    one.add_fact("b", "The user has a dog named Rex.", user="u")
    scope = Scope(bot="b", kind="fact", user="u")
    kept, again = one.similar(scope, "The user's employer is Initech.")
    assert kept.text == "The user's employer is Initech." and again > 0.82
    _, other = one.similar(scope, "The user plays the cello on Sundays.")
    assert other < 0.82
    one.index.close()


def test_a_question_naming_a_day_keeps_that_day_s_memories_over_a_floor_and_no_other_day_s(service):
    """A question "what did we decide yesterday?" shares one word with what was decided: the day is the
    rest of it, and a floor (the proxy's and /ask's 0.4) keeps yesterday's memories, not another day's."""
    day = 86_400_000
    now = now_ms()
    said = [
        ChatMessage(source_id="m1", text="We agreed the launch moves to March.", created_at=now - day),
        ChatMessage(source_id="m2", text="Budget is approved at forty thousand.", created_at=now - 4 * day),
        ChatMessage(source_id="m3", text="We agreed on blue for the logo.", created_at=now - 4 * day),
    ]
    ids = _ids(service.add_messages("b", said).memories)
    found = service.search("b", "what did we decide yesterday?", kind="message", min_score=0.4)
    assert _ids(found) == [ids[0]]
    # with no day named, the same floor keeps none of them: one word of two is what the day gave
    assert _ids(service.search("b", "what did we decide?", kind="message", min_score=0.4)) == []


def test_a_question_naming_someone_by_what_others_call_them_keeps_their_memories_over_a_floor(service):
    """A question "what is Mel planning?" — Mel is what Jordan calls Melanie. Her memory shares no other
    word of it, and is half its answer as any memory of hers is: a floor of 0.4 keeps it."""
    said = [
        ChatMessage(
            "n1",
            "Great, we booked a cabin by the lake for August.",
            "222",
            thread="c",
            content={"displayName": "Melanie"},
        ),
        ChatMessage(
            "n2",
            "Nice, Mel! I am repainting my kitchen yellow.",
            "111",
            thread="c",
            content={"displayName": "Jordan"},
        ),
    ]
    cabin, kitchen = _ids(service.add_messages("b", said).memories)
    found = service.search("b", "what is Mel planning?", kind="message", min_score=0.4)
    assert cabin in _ids(found)
    assert all(m.score >= 0.5 for m in found if m.id == cabin)
    # Jordan's turn holds the word "Mel" in its text: kept for its words, as before
    assert kitchen in _ids(found)
    assert _ids(service.search("b", "what is Dana planning?", kind="message", min_score=0.4)) == []


def test_a_question_mentioning_someone_on_discord_finds_their_memories_first_and_over_a_floor(service):
    """An /ask prompt names people as Discord writes a mention, "<@id>": the memories of that user id (a
    Discord message's author) move up, and have the mention beside their text."""
    said = [
        ChatMessage("1", "We booked a cabin by the lake for the trip.", "80351110224678912", thread="c"),
        ChatMessage("2", "The trip is on: I booked the lake cabin.", "41771983423143937", thread="c"),
    ]
    cabin, other = _ids(service.add_messages("b", said).memories)
    assert _ids(service.search("b", "who booked the lake cabin for the trip?", kind="message"))[0] == other
    question = "what did <@!80351110224678912> book for the trip?"
    assert _ids(service.search("b", question, kind="message"))[0] == cabin
    floored = service.search("b", "what does <@80351110224678912> want?", kind="message", min_score=0.4)
    assert _ids(floored) == [cabin]


def test_in_one_person_s_memories_their_name_tells_no_memory_from_another(service):
    """In one person's memories (LibreChat's scope), a question naming that person is no more answered by
    one memory than another: the name counts toward none, and an unrelated memory stays under the floor."""
    service.add_fact("b", "Anna keeps bees on the roof.", user="anna")
    service.add_fact("b", "The car needs new tyres.", user="anna")
    found = service.search("b", "what does Anna like?", user="anna", min_score=0.4)
    assert [m.text for m in found] == ["Anna keeps bees on the roof."]


def test_a_question_naming_someone_asks_its_meaning_as_their_own_memories_put_it(service, embedder):
    """ "What did Melanie paint?" is answered by Melanie's "I painted ...", which never says her name: the
    meaning leg is asked as "What did I paint?" (the words leg keeps the name: her memories have it beside
    their text), one embed as for any question. A question naming no author is embedded as it is."""
    said = [
        ChatMessage("1", "I painted a sunrise over the lake.", "Melanie", thread="c"),
        ChatMessage("2", "Lovely! Melanie, you should show it.", "Caroline", thread="c"),
        ChatMessage("3", "I adopted a puppy last week.", "Caroline", thread="c"),
    ]
    sunrise, _, _ = _ids(service.add_messages("b", said).memories)
    service.search("b", "warm-up", kind="message")  # the relevance levels are measured on the first search
    asked: list[str] = []
    embed = embedder.embed
    embedder.embed = lambda texts: asked.extend(texts) or embed(texts)
    assert _ids(service.search("b", "What did Melanie paint?", kind="message"))[0] == sunrise
    assert asked == ["What did I paint?"]
    asked.clear()
    service.search("b", "What did Dana paint?", kind="message")
    assert asked == ["What did Dana paint?"]
