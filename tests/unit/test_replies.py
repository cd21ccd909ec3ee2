"""A question's answer (engram.replies): which messages ask, which answer, and how far an answer moves."""

from __future__ import annotations

import pytest

from engram.replies import asks, lift_answers, questions_answered, with_answers
from engram.vectors import Hit


def hit(i: int, score: float, user: str, text: str, **payload) -> Hit:
    return Hit(i, score, {"user": user, "text": text, **payload})


@pytest.mark.parametrize(
    ("text", "asking"),
    [
        ("How often do you all work out?", True),
        ("Wow, great! How did it taste?", True),  # a message that ends by asking
        ("Which one? 😅", True),  # an emoji after the mark
        ("Is that your dog? [image: a photo of a puppy]", True),  # an attachment's description after it
        ("(did it rain?)", True),
        ("Did it rain? I hope not.", False),  # it asked, then said something else: that is what is answered
        ("Three times a week.", False),
        ("What?!", False),  # surprise, not a question
        ("", False),
    ],
)
def test_a_message_asks_when_it_ends_by_asking(text, asking):
    assert asks(text) is asking


def test_the_answer_is_the_message_after_a_question_by_someone_else():
    question = hit(1, 0.9, "maria", "How often do you all work out?")
    answer = hit(2, 0.2, "john", "Three times a week.", contextSource=1, contextUser="maria")
    own = hit(3, 0.3, "maria", "Also, what time?", contextSource=1, contextUser="maria")  # goes on asking
    after_statement = hit(4, 0.1, "john", "Cool.", contextSource=2, contextUser="john")  # 2 does not ask
    elsewhere = hit(5, 0.1, "erin", "Sure.", contextSource=99, contextUser="dave")  # its question not a hit
    found = questions_answered([question, answer, own, after_statement, elsewhere])
    assert found == {2: question}


def test_a_discord_reply_to_a_question_answers_it_wherever_it_is_in_the_channel():
    question = hit(1, 0.9, "maria", "Which room is the meeting in?", sourceId="1150000000000000001")
    between = hit(2, 0.3, "tim", "Lunch was great.", contextSource=1, contextUser="maria")
    reply = {"replyTo": {"messageId": "1150000000000000001", "authorId": "maria"}}
    answer = hit(3, 0.1, "john", "Room 4.", contextSource=2, contextUser="tim", content=reply)
    assert questions_answered([question, between, answer]) == {2: question, 3: question}


def test_an_answer_moves_up_by_a_share_of_its_question_s_score():
    hits = [
        hit(1, 1.0, "maria", "How often do you all work out?"),
        hit(7, 0.5, "tim", "I work out at the gym on Mondays."),
        hit(2, 0.2, "john", "Three times a week.", contextSource=1, contextUser="maria"),
    ]
    answered = questions_answered(hits)
    assert [h.id for h in lift_answers(hits, answered, 0.45)] == [1, 2, 7]  # 0.2 + 0.45 > 0.5
    assert [h.id for h in lift_answers(hits, answered, 0.2)] == [1, 7, 2]  # 0.2 + 0.2 < 0.5
    assert [h.id for h in lift_answers(hits, answered, 0.0)] == [1, 7, 2]  # 0: nothing moves
    assert lift_answers(hits, {}, 0.45) == hits


def test_a_point_written_before_its_link_was_stored_moves_nothing():
    """A point without `contextSource` (written before 1.12, until it is written again) is not an answer."""
    hits = [hit(1, 1.0, "maria", "How often?"), hit(2, 0.2, "john", "Daily.", contextUser="maria")]
    assert questions_answered(hits) == {}


def test_a_scan_by_words_gains_the_answers_of_the_questions_it_found_and_nothing_else():
    found = [hit(1, 0.9, "maria", "How often do you all work out?"), hit(3, 0.5, "tim", "I work out daily.")]
    replies = [
        hit(2, 0.0, "john", "Three times a week.", contextSource=1, contextUser="maria"),  # answers 1
        hit(4, 0.0, "erin", "Nice!", contextSource=3, contextUser="tim"),  # 3 does not ask
        hit(6, 0.0, "john", "Sure.", contextSource=5, contextUser="dave"),  # 5 was not found
        hit(3, 0.0, "tim", "I work out daily.", contextSource=1, contextUser="maria"),  # found already
    ]
    assert [h.id for h in with_answers(found, replies)] == [1, 3, 2]
