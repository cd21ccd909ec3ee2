"""A question's answer (engram.replies): a thread message answering a question a search finds moves up with
it, and is as relevant as the question; the link is the answer's context, so a forget of the one who asked
takes it away. The tests search by words alone (the embedder down) so that what ranks a hit is the words
its point holds. Run on every seam (see tests/rules/service.py)."""

from __future__ import annotations

import pytest

from engram.errors import Unavailable
from engram.service import ChatMessage
from tests.rules import with_retrieval

BOT = "replies"
QUESTION = "how often do they work out together?"


@pytest.fixture
def by_words(service):
    service.indexer.embedder.down = True
    return service


def _thread(service, thread: str, *turns: tuple[str, str], start: int = 1_767_225_600_000) -> list[int]:
    """Turns (user, text) stored one by one, a second apart, as a live chat writes them; their ids."""
    ids = []
    for n, (user, text) in enumerate(turns):
        message = ChatMessage(
            source_id=f"{thread}-{n}", text=text, user=user, thread=thread, created_at=start + n * 1000
        )
        ids.append(service.add_messages(BOT, [message]).memories[0].id)
    return ids


def _chats(service) -> tuple[int, int]:
    """Two threads that speak of working out; the id of Maria's question and of John's answer to it."""
    _thread(
        service,
        "gym",
        ("tim", "I work out at the gym with my brother most mornings."),
        ("erin", "We often work out together outdoors."),
        ("tim", "Family time outdoors is the best kind of workout."),
        ("erin", "We go every Sunday, rain or shine."),
        ("tim", "Nice, enjoy it."),
        ("erin", "Thanks!"),
    )
    question, answer = _thread(
        service,
        "home",
        ("maria", "Great news! How often do you all work out together?"),
        ("john", "Three times a week, it keeps us on track."),
    )
    return question, answer


def _ranked(service, query: str = QUESTION, min_score: float | None = None, limit: int = 5) -> list[int]:
    return [m.id for m in service.search(BOT, query, kind="message", limit=limit, min_score=min_score)]


def test_an_answer_found_through_its_question_ranks_with_it(by_words):
    question, answer = _chats(by_words)
    found = _ranked(by_words)
    assert found.index(answer) == found.index(question) + 1 < 3
    unmoved = _ranked(with_retrieval(by_words, answer_weight=0.0))
    # without the rule, a gym message that says nothing of how often is between them
    assert unmoved.index(answer) > unmoved.index(question) + 1


def test_an_answer_is_as_relevant_as_its_question(by_words):
    question, answer = _chats(by_words)
    scores = {m.id: m.score for m in by_words.search(BOT, QUESTION, kind="message", limit=5)}
    assert scores[answer] == scores[question]
    # a floor keeps it where it keeps the question
    assert answer in _ranked(by_words, min_score=scores[question])
    unmoved = with_retrieval(by_words, answer_weight=0.0)
    assert answer not in _ranked(unmoved, min_score=scores[question])


def test_one_s_own_next_message_does_not_answer_one_s_question(by_words):
    question, follow_up = _thread(
        by_words, "solo", ("maria", "How often do you all work out?"), ("maria", "Also, where?")
    )
    scores = {m.id: m.score for m in by_words.search(BOT, "work out how often", kind="message", limit=5)}
    assert scores.get(follow_up, 0.0) < scores[question]


def test_forgetting_who_asked_takes_the_link_with_their_words(by_words):
    question, answer = _chats(by_words)
    by_words.forget_user(BOT, "maria")
    found = by_words.search(BOT, QUESTION, kind="message", limit=10)
    assert question not in [m.id for m in found]
    unmoved = with_retrieval(by_words, answer_weight=0.0).search(BOT, QUESTION, kind="message", limit=10)
    # the answer's context is gone, and with it what tied it to her question: it ranks and scores on its own
    assert [(m.id, m.score) for m in found] == [(m.id, m.score) for m in unmoved]


def test_with_the_index_down_the_records_scan_moves_the_answer_too(engine):
    """Qdrant down, a search scans the records by words (reads._words_fallback): the same rule holds there."""
    service = engine.service
    service.indexer.embedder.down = True
    question, answer = _chats(service)
    service.index.down = True
    scores = {m.id: m.score for m in service.search(BOT, QUESTION, kind="message", limit=5)}
    found = list(scores)
    assert found.index(answer) == found.index(question) + 1
    assert scores[answer] == scores[question]
    service.index.down = False


def test_a_question_of_someone_whose_forget_is_under_way_moves_no_answer_and_takes_no_place(engine):
    """Her forget could not finish (the index down): every read hides her question at once, so it lends its
    score to no reply, and a search still gives as many memories as it is asked for."""
    service = engine.service
    service.indexer.embedder.down = True
    tim, erin = _thread(
        service, "gym", ("tim", "I often work out at the gym."), ("erin", "We work out together outdoors.")
    )
    (busy,) = _thread(service, "office", ("tim", "Work was busy today."))
    asked = ChatMessage(source_id="q-1", text="How often do you all work out together?", user="maria")
    reply = ChatMessage(
        source_id="a-1",
        text="Three times a week, it keeps us together.",
        user="john",
        thread="elsewhere",  # another channel's thread: the reply alone ties it to her question
        content={"message": "Three times a week", "replyTo": {"messageId": "q-1", "authorId": "maria"}},
    )
    service.add_messages(BOT, [asked])
    answer = service.add_messages(BOT, [reply]).memories[0].id
    found = _ranked(service)
    assert found.index(answer) < found.index(busy)  # her question lifts it
    service.index.down = True
    with pytest.raises(Unavailable):
        service.forget_user(BOT, "maria")
    service.index.down = False
    found = _ranked(service, limit=4)
    assert found == [tim, erin, busy, answer]  # four, none hers, and the reply on its own words again


def test_an_import_links_each_answer_to_its_question_as_the_source_did(service):
    """An export's lines carry a context's words and author, not its record: the import finds the record (the
    thread's message before it, the same words by the same author), so answers still follow their
    questions in the installation they moved to."""
    from engram.portability import export_lines, import_lines

    _chats(service)
    unrelated = ChatMessage(source_id="x-1", text="Three times a week.", user="john", context="Which bus?")
    service.add_messages(BOT, [unrelated])
    moved = import_lines(service, "moved", list(export_lines(service, BOT)))
    assert moved["errors"] == []
    records = {r.source_id: r for r in (service.records.get("moved", m.id) for m in _all(service, "moved"))}
    assert records["home-1"].context_source == records["home-0"].id  # John's answer to Maria's question
    assert records["gym-1"].context_source == records["gym-0"].id
    assert records["x-1"].context_source is None  # a context no stored message holds: words, no record


def _all(service, bot: str):
    return service.list(bot, kind="message", limit=500)
