"""Windows (issue 31): each memory's words include the turns around it in its thread (a fact's: its author's
facts around it in the same scope), and those words quote other people, so every forget, delete and change
takes them out of the points around, on both index implementations. The words tests search by words alone
(the embedder down) so that a hit can only come from the words a point holds; the meaning tests read the
points' vectors."""

from __future__ import annotations

import pytest

from engram.embedders import own_vector_name
from engram.line_windows import mean_of, mix_meaning
from engram.service import ChatMessage
from tests.rules.windows import *  # noqa: F403 - the rules' own tests, run here on DynamoDB and both indexes

BOT = "windows"


def _thread(
    service, *turns: tuple[str, str], thread: str = "t1", start: int = 1_767_225_600_000, step: int = 1000
):
    """Turns (user, text) stored one by one, `step` ms apart (a second), as a live chat writes them; their
    ids."""
    ids = []
    for n, (user, text) in enumerate(turns):
        added = service.add_messages(
            BOT,
            [
                ChatMessage(
                    source_id=f"{thread}-{n}",
                    text=text,
                    user=user,
                    thread=thread,
                    created_at=start + n * step,
                )
            ],
        )
        ids.append(added.memories[0].id)
    return ids


def _found(service, query: str, kind: str = "message") -> set[int]:
    return {m.id for m in service.search(BOT, query, kind=kind, limit=20)}


@pytest.fixture
def words_only(service):
    assert service.retrieval.window_turns and service.retrieval.words_window, "windows are on by default"
    service.indexer.embedder.down = True
    return service


WORDS = [
    "amber",
    "basil",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "hazel",
    "indigo",
    "juniper",
    "kestrel",
    "lupin",
]


# ----- window meaning: each point's searched vector moves towards its window's own vectors -------------


def _vectors(service, ids: list[int]) -> dict[int, dict[str, list[float]]]:
    name = service.indexer.dense_name
    return service.index.dense_of([name, own_vector_name(name)], ids)


def _mixed_from(service, vectors: dict, at: int, around: list[int]) -> list[float]:
    """What the point `at` should search with: its own vector mixed with the mean of `around`'s own."""
    own = own_vector_name(service.indexer.dense_name)
    weight = service.retrieval.meaning_window
    return mix_meaning(vectors[at][own], mean_of([vectors[i][own] for i in around]), weight)


def _close(a: list[float], b: list[float]) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


def test_records_stored_before_windows_get_their_line_and_windows_at_the_next_reconcile(words_only):
    """A table from before byLine: its rows carry no line and its points no windows; a reconcile gives each
    row its line, and it and the points around it their windows."""
    from dataclasses import replace

    from engram.keeper import IndexKeeper
    from engram.store.keys import record_pk
    from engram.store.models import MemoryRecord

    shipped = words_only.indexer.retrieval
    words_only.indexer.retrieval = replace(shipped, words_window=0.0, meaning_window=0.0)
    ids = _thread(
        words_only,
        ("alice", "Where do we meet on Saturday?"),
        ("bob", "At the old quarry car park."),
        ("carol", "Perfect, I will bring the lanterns."),
    )
    words_only.indexer.retrieval = shipped
    for memory_id in ids:  # as a row written before the upgrade
        MemoryRecord(record_pk(BOT, memory_id), memory_id).update(actions=[MemoryRecord.line.remove()])
    assert _found(words_only, "lanterns") == {ids[2]}
    keeper = IndexKeeper(words_only.indexer)
    assert keeper.reconcile(BOT)["lined"] == 3
    assert _found(words_only, "lanterns") == set(ids)
    assert {r.stored_line for r in words_only.records.batch_get(BOT, ids).values()} == {f"{BOT}#t1"}
    assert keeper.reconcile(BOT)["lined"] == 0
