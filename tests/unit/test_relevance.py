"""engram.relevance: a cosine placed on its model's own scale, the share of a query's words, and the two
combined — the score search shows and a floor compares."""

import math

import pytest

from engram.relevance import (
    CENTRE_BELOW,
    QUERIES,
    STATEMENTS,
    Calibration,
    calibrate,
    combined,
    cosine,
    words_share,
)
from engram.words import terms

MINILM = Calibration(unrelated=0.17, related=0.39)  # about what MiniLM's reference pairs measure


def test_a_cosine_is_placed_between_the_models_own_levels():
    assert MINILM.meaning(0.05) == 0.0  # where unrelated texts are
    assert MINILM.meaning(0.17) == 0.0
    assert MINILM.meaning(0.39) == pytest.approx(0.5)  # a question and an answer sharing no word
    assert MINILM.meaning(0.61) == pytest.approx(1.0)
    assert MINILM.meaning(0.95) == 1.0
    assert MINILM.meaning(None) == 0.0 and MINILM.meaning(math.nan) == 0.0


def test_the_same_cosine_means_less_to_a_model_whose_levels_are_higher():
    e5 = Calibration(unrelated=0.78, related=0.80)
    assert e5.meaning(0.45) == 0.0 < MINILM.meaning(0.45)


def test_a_model_that_cannot_tell_the_pairs_apart_is_taken_at_its_word():
    flat = Calibration(unrelated=0.2, related=0.205)
    assert flat.meaning(0.6) == pytest.approx(0.6) and flat.meaning(-0.3) == 0.0


def test_calibrate_measures_the_levels_on_the_reference_pairs():
    n = len(QUERIES)
    assert n == len(STATEMENTS) >= 20

    def basis(i):
        return [1.0 if k == i else 0.0 for k in range(2 * n)]

    # statement i leans on its own query only, at cosine c_i (0.30, 0.31, ...): unrelated pairs are at 0
    lean = [0.30 + 0.01 * i for i in range(n)]
    queries = [basis(i) for i in range(n)]
    statements = [
        [c * a + math.sqrt(1 - c * c) * b for a, b in zip(basis(i), basis(n + i), strict=True)]
        for i, c in enumerate(lean)
    ]
    levels = calibrate(queries, statements)
    assert levels.unrelated == pytest.approx(0.0)
    assert levels.related == pytest.approx(sorted(lean)[n // 2 - 1] / 2 + sorted(lean)[n // 2] / 2)


def test_levels_too_close_on_plain_cosines_are_measured_from_the_reference_means():
    n = len(QUERIES)

    def basis(i):
        return [1.0 if k == i else 0.0 for k in range(2 * n + 1)]

    def shared(v):  # every vector mostly one direction (the last), as E5's are
        return [0.2 * x for x in v[:-1]] + [0.95]

    queries = [shared(basis(i)) for i in range(n)]
    statements = [
        shared([0.6 * a + 0.8 * b for a, b in zip(basis(i), basis(n + i), strict=True)]) for i in range(n)
    ]
    plain = [cosine(q, s) for q in queries for s in statements]
    assert max(plain) - min(plain) < CENTRE_BELOW  # plainly, the pairs cannot be told apart
    levels = calibrate(queries, statements)
    assert levels.centred and levels.related - levels.unrelated >= CENTRE_BELOW
    assert levels.meaning(levels.cosine_of(queries[0], statements[0])) == pytest.approx(0.5, abs=0.05)
    assert levels.meaning(levels.cosine_of(queries[0], statements[1])) == 0.0
    assert not MINILM.centred and MINILM.cosine_of([1.0, 0.0], [1.0, 1.0]) == pytest.approx(math.sqrt(0.5))


def test_cosine_of_a_zero_vector_is_zero():
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert cosine([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "query,text,share",
    [
        ("tea", "I drink green tea", 1.0),  # a one-term query found
        ("dog name", "The dog is called Biscuit", 0.5),  # one word of two is half the question
        ("quantum physics lecture notes", "I missed the lecture", 0.0),  # one of four: no sign
        ("quantum physics lecture notes", "The physics lecture ran late", 0.5),
        ("lives", "The user lived in Munich", 1.0),  # stemmed
        ("where do I", "I live in Munich", 0.0),  # stop words alone: nothing to share
    ],
)
def test_the_share_of_a_querys_words(query, text, share):
    assert words_share(set(terms(query)), text) == pytest.approx(share)


def test_words_a_memory_has_beyond_its_text_count_as_found():
    """A memory of the day a question names has the words naming it: "yesterday" is found in it."""
    asked = set(terms("what did we decide yesterday"))
    assert words_share(asked, "We agreed the launch moves to March") == 0.0
    assert words_share(asked, "We agreed the launch moves to March", terms("yesterday")) == 0.5
    assert words_share(asked, "We decided on March", terms("yesterday")) == 1.0
    # only where the query asks more than those words: "thanks, Mel!" is answered by none of Mel's memories
    assert words_share(set(terms("thanks, Mel!")), "We booked a cabin", terms("Mel")) == 0.0
    assert words_share(set(terms("what is Mel planning")), "We booked a cabin", terms("Mel")) == 0.5


def test_two_signs_are_combined_as_independent_chances():
    assert combined(0.0, 0.0) == 0.0
    assert combined(0.5, 0.0) == 0.5 == combined(0.0, 0.5)
    assert combined(0.5, 0.5) == pytest.approx(0.75)
    assert combined(1.0, 0.2) == 1.0
