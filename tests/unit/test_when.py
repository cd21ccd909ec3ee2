"""Days a question names (engram.when): which are read, and how that day's memories move up."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram.vectors import Hit
from engram.when import DAY_MS, MARGIN_MS, favour_dated, read_days


def ms(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)


NOW = ms("2026-12-06T15:00:00")


def named_days(question: str, now: int) -> tuple[tuple[int, int], ...]:
    return read_days(question, now).spans


def span(day: str) -> tuple[int, int]:
    return ms(day) - MARGIN_MS, ms(day) + DAY_MS + MARGIN_MS


@pytest.mark.parametrize(
    ("question", "days"),
    [
        ("What did Nate make on 9 November, 2022?", ["2022-11-09"]),
        ("What did Nate make on 9 November 2022?", ["2022-11-09"]),
        ("What did Nate make on 9th of November, 2022?", ["2022-11-09"]),
        ("What did Joanna recommend on February 7, 2022?", ["2022-02-07"]),
        ("what did joanna recommend on feb 7th 2022", ["2022-02-07"]),
        ("What changed on Sept. 3, 2023?", ["2023-09-03"]),
        ("Anything from 2023-06-03?", ["2023-06-03"]),
        ("Between 3 June, 2023 and 1 July 2023, what did Maria do?", ["2023-06-03", "2023-07-01"]),
        ("What did I say yesterday?", ["2026-12-05"]),
        ("What did we decide today?", ["2026-12-06"]),
        ("What did we watch last night?", ["2026-12-05"]),
        ("What did I say the day before yesterday?", ["2026-12-04"]),  # not yesterday as well
        ("What did I tell you three days ago?", ["2026-12-03"]),
        ("What did I tell you 10 days ago?", ["2026-11-26"]),
        ("What did I tell you 90 days ago?", []),  # too far back to be a day one remembers
        ("What did I say a day ago?", ["2026-12-05"]),
        ("What did I tell you a week ago?", ["2026-11-29"]),
        ("What did we decide two weeks ago?", ["2026-11-22"]),
        ("What did we decide 6 weeks ago?", []),  # past 31 days: too far back to be a day one remembers
        # a date in numbers alone is two different days in two countries; a month or a year is too wide
        ("What happened on 11/09/2022?", []),
        ("What did Melanie paint in May 2023?", []),
        ("What did Melanie paint in 2022?", []),
        # a weekday said to be past is the latest before today (NOW is a Sunday); "last weekend" the latest
        # Saturday and Sunday both before today
        ("what did we decide last friday", ["2026-12-04"]),
        ("What did I say this past Saturday?", ["2026-12-05"]),
        ("What did I say last Sunday?", ["2026-11-29"]),  # today is Sunday: a week back
        ("What did we watch last weekend?", ["2026-11-28", "2026-11-29"]),
        # a weekday in a question asked in the past tense is the latest before today, as "last Tuesday" is
        ("What did Melanie paint on Tuesday?", ["2026-12-01"]),
        ("Was the standup on Monday or Wednesday?", ["2026-11-30", "2026-12-02"]),
        ("what didn't we finish friday", ["2026-12-04"]),
        ("What did I say on Sunday?", ["2026-11-29"]),  # today is Sunday: a week back
        # a weekday not said to be past may be the coming one: asked not in the past, or said to be future,
        # or placed by its words, every one of them (plural), or another thing's (possessive)
        ("Any plans for Friday?", []),
        ("What's happening on Tuesday?", []),
        ("What did you say will happen on Tuesday?", []),
        ("What did we say we'll do on Tuesday?", []),
        ("What did we plan for Tuesday?", []),
        ("What did we do every Tuesday?", []),
        ("What did Melanie paint on Tuesdays?", []),
        ("What did Mel say about Tuesday's meeting?", []),
        ("What should I bring next Friday?", []),
        ("Any plans for the weekend?", []),
        # a written date is when it was said; what is counted from it is not another day's
        ("What did Joanna just finish last Friday on 23 January, 2022?", ["2022-01-23"]),
        ("What was Tim's huge writing issue last week, as mentioned on November 6, 2023?", ["2023-11-06"]),
        ("What did Joanna contribute to on the Sunday before October 25, 2022?", ["2022-10-25"]),
        ("What did I say yesterday about 9 November, 2022?", ["2022-11-09"]),
        ("What happened on 31 February 2023?", []),  # no such day
        ("Did she run 25 May times?", []),
    ],
)
def test_a_question_names_the_days_it_writes_unambiguously(question, days):
    assert named_days(question, NOW) == tuple(span(d) for d in days)


@pytest.mark.parametrize(
    ("question", "words"),
    [
        ("What did we decide yesterday?", "yesterday"),
        ("what did we decide last friday", "last friday"),
        ("What did Nate make on 9 November, 2022, and yesterday?", "9 November, 2022"),  # the written date
        ("What did Melanie paint on Tuesdays?", ""),
        ("What did Melanie paint on Tuesday?", "Tuesday"),
        ("What did we decide?", ""),
        # today is as often what a request is for as what it asks about: its words are not told
        ("How are you today?", ""),
        ("What should I cook tonight, or what did I cook yesterday?", "yesterday"),
        ("What did we decide on 6 December, 2026?", "6 December, 2026"),  # written: told, today or not
    ],
)
def test_a_question_s_words_naming_its_days_are_told_with_them(question, words):
    assert read_days(question, NOW).words == words


def test_a_days_span_reaches_a_day_either_side_for_the_time_zones_it_was_said_in():
    (start, end) = named_days("on 9 November, 2022", NOW)[0]
    evening_in_new_york = ms("2022-11-10T03:00:00")  # 22:00 on the 9th in UTC-5
    morning_in_tokyo = ms("2022-11-08T23:30:00")  # 08:30 on the 9th in UTC+9
    assert start <= evening_in_new_york < end and start <= morning_in_tokyo < end
    assert not start <= ms("2022-11-11T00:00:00") < end


def hit(i: int, score: float, day: str) -> Hit:
    return Hit(i, score, {"createdAt": ms(day)})


def test_the_named_days_memories_move_up_and_one_the_search_did_not_reach_joins_them():
    spans = named_days("What did Nate cook on 9 November, 2022?", NOW)
    hits = [hit(1, 1.5, "2022-10-01"), hit(2, 1.2, "2022-10-02"), hit(3, 1.0, "2022-11-09T12:00:00")]
    dated = [hit(3, 1.5, "2022-11-09T12:00:00"), hit(4, 1.0, "2022-11-09T18:00:00")]
    moved = favour_dated(hits, dated, spans, weight=1.0, k=2)
    assert [h.id for h in moved] == [3, 4, 1, 2]  # 1/4 + 1/2, 1/5 + 1/2, then 1/2 and 1/3
    # the same hits with nothing to move: the search's order, as reciprocal ranks
    assert [h.id for h in favour_dated(hits, dated, spans, weight=0.0, k=2)] == [1, 2, 3]
    assert [h.id for h in favour_dated(hits, [], spans, weight=0.5, k=2)] == [1, 2, 3]


def test_the_search_s_best_hit_stays_above_a_named_days_lesser_ones_at_a_small_weight():
    spans = named_days("on 9 November, 2022", NOW)
    hits = [hit(1, 1.5, "2022-10-01"), *(hit(n, 1.0 / n, "2022-11-09") for n in range(2, 12))]
    moved = favour_dated(hits, [], spans, weight=0.1, k=2)
    assert moved[0].id == 1  # 1/2 against 1/(2+n) + 0.05 for n >= 1
    assert [h.id for h in moved[1:]] == list(range(2, 12))
