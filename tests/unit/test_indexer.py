"""The indexer and the keeper on the in-memory stores and the embedded index: a record's point follows its
record (written, marked, rewritten after a change, restored by a reconcile), and what could not be written
waits, marked, for the sweep."""

from __future__ import annotations

from engram.keeper import IndexKeeper
from engram.service import ChatMessage
from engram.vectors import Scope


def test_a_write_leaves_its_record_marked_with_the_model_of_its_point(service):
    memory, _ = service.add_fact("b", "Grows chillies.")
    record = service.records.get("b", memory.id)
    assert record.pending is False and record.vector_model == service.dense_name
    assert service.indexer.dense_exists(service.dense_name)
    assert service.index.with_dense(service.dense_name, [memory.id]) == {memory.id}


def test_a_change_is_rewritten_with_its_new_meaning(service):
    memory, _ = service.add_fact("b", "Drinks tea.")
    before = service.index.dense_of([service.dense_name], [memory.id])[memory.id]
    service.update("b", memory.id, "Walks the dog.")
    after = service.index.dense_of([service.dense_name], [memory.id])[memory.id]
    assert before != after
    assert service.search("b", "puppy")[0].id == memory.id


def test_a_write_with_the_index_down_is_kept_and_waits_for_its_point(service, engine):
    engine.service.index.down = True
    memory, _ = service.add_fact("b", "Written while Qdrant was down.")
    engine.service.index.down = False
    assert service.records.pending.ids("b", 10) == [memory.id]
    assert service.index.count(Scope(bot="b")) == 0
    assert service.indexer.fill_vectors("b", [memory.id]) == 1  # complete
    assert service.indexer.fill_vectors("b", [memory.id]) == 0  # nothing waits: no embed
    assert service.index.count(Scope(bot="b")) == 1 and service.records.pending.ids("b", 10) == []


def test_the_embedder_down_leaves_a_words_point_and_says_why(service, embedder):
    embedder.down = True
    memory, _ = service.add_fact("b", "Written while the embedder was down.")
    assert service.index.existing([memory.id]) == {memory.id}
    assert service.index.with_dense(service.dense_name, [memory.id]) == set()
    assert "down" in service.last_error
    assert service.records.get("b", memory.id).pending  # its meaning is still to come


def test_a_reconcile_restores_missing_points_and_counts_what_it_did(service):
    kept, _ = service.add_fact("b", "Kept.")
    lost, _ = service.add_fact("b", "Its point was lost.")
    service.index.delete([lost.id])
    keeper = IndexKeeper(service.indexer)
    outcome = keeper.reconcile("b")
    assert outcome["reindexed"] >= 1
    assert service.index.existing([kept.id, lost.id]) == {kept.id, lost.id}
    assert keeper.reconcile("b")["reindexed"] == 0  # nothing left to do


def test_a_rebuild_from_nothing_rewrites_every_record_s_point(service):
    facts = [service.add_fact("b", f"Fact {n}.")[0] for n in range(4)]
    service.add_messages(
        "b", [ChatMessage(source_id=f"m{n}", text=f"Message {n}.", thread="t") for n in range(3)]
    )
    service.index.delete_scope(Scope(bot="b"))
    IndexKeeper(service.indexer).rebuild("b")
    assert service.index.count(Scope(bot="b")) == 7
    assert service.index.existing([f.id for f in facts]) == {f.id for f in facts}


def test_a_removed_memory_leaves_no_point(service):
    memory, _ = service.add_fact("b", "To be removed.")
    service.remove("b", memory.id)
    assert service.index.existing([memory.id]) == set()
    assert service.records.get("b", memory.id) is None


def test_a_message_s_meaning_is_made_of_its_first_characters_and_a_fact_s_of_all_of_it(service):
    service.indexer.message_vector_chars = 10
    added = service.add_messages("b", [ChatMessage(source_id="1", text="What time is the ferry tomorrow?")])
    fact, _ = service.add_fact("b", "What time is the ferry tomorrow?")
    message = service.records.get("b", added.memories[0].id)
    assert service.indexer.vector_text(message) == "What time "
    assert (
        service.indexer.vector_text(service.records.get("b", fact.id)) == "What time is the ferry tomorrow?"
    )
    service.indexer.message_vector_chars = 0  # messages by words only
    assert service.indexer.vector_text(message) is None


def test_an_audit_reads_every_point_whole(service):
    memory, _ = service.add_fact("b", "Audited words.", user="alice")
    other, _ = service.add_fact("other", "Another bot's.")
    points = {p.id: p for p in service.index.every_point()}
    assert set(points) == {memory.id, other.id}
    assert points[memory.id].payload["text"] == "Audited words." and points[memory.id].words.indices
    assert service.dense_name in points[memory.id].dense


def test_a_message_is_found_by_its_authors_name_though_its_words_never_say_it(service, tmp_path):
    """On Discord a name lives only with its author: the index reads a message as "Melanie: …"
    (Retrieval.author_label), so a question naming her finds her message by its words; read without its
    author, the message of the other, which shares a word with the question, comes first. (Names that move
    hits, engram.names.favour, are off here: this is the index alone.)"""
    from dataclasses import replace

    from engram.retrieval import DEFAULT
    from engram.service import MemoryService
    from engram.store.in_memory import InMemoryRecords, InMemoryState
    from engram.vectors.edge import EdgeIndex

    said = [
        ("81234567", {"author": "melanie_p", "displayName": "Melanie"}, "I finished a new bowl tonight"),
        (
            "99887766",
            {"author": "caro.b", "displayName": "Caroline"},
            "Did you make anything? I tried a vase",
        ),
        ("55443322", {"author": "jo", "displayName": "Jo"}, "Next week I want to make bread"),
    ]

    def first(author_label: bool) -> str:
        reader = MemoryService(
            records=InMemoryRecords(),
            state=InMemoryState(),
            index=EdgeIndex(tmp_path / f"labels-{author_label}"),
            embedder=service.indexer.embedder,
            queue=service.queue,
            retrieval=replace(DEFAULT, name_weight=0.0, author_label=author_label),
        )
        messages = [
            # threads of their own: a window would hold the other's words (and name)
            ChatMessage(source_id=f"m{n}", text=text, user=user, content=content, thread=f"t{n}")
            for n, (user, content, text) in enumerate(said)
        ]
        added = reader.add_messages("b", messages)
        melanie = reader.records.get("b", added.memories[0].id)
        label = "Melanie: " if author_label else ""
        assert reader.indexer.vector_text(melanie) == f"{label}I finished a new bowl tonight"
        return reader.search("b", "What did Melanie make?", kind="message")[0].user

    assert first(author_label=True) == "81234567"
    assert first(author_label=False) != "81234567"
