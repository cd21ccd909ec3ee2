"""How the word and meaning sides are fused: rank fusion counts ranks, the blend counts how far each hit's
score is between its side's best and worst candidate."""

from __future__ import annotations

import pytest

from engram.vectors import Fusion, Hit, fuse


def hits(scores: dict[int, float]) -> list[Hit]:
    return [Hit(i, s, {}) for i, s in scores.items()]


WORDS = hits({1: 9.0, 2: 8.9, 3: 1.0})  # 1 and 2 nearly tie on words, 3 is far behind
MEANING = hits({3: 0.80, 2: 0.79, 1: 0.10})


def test_a_blend_weighs_how_far_apart_scores_are_where_rank_fusion_sees_only_the_order():
    rrf = fuse([(WORDS, 1.0), (MEANING, 1.0)], Fusion(k=2), 3)
    blend = fuse([(WORDS, 1.0), (MEANING, 1.0)], Fusion(k=2, mode="blend"), 3)
    # ranks: 1 is 1st and 3rd, 3 is 3rd and 1st, 2 is 2nd twice: with k = 2 rank fusion puts 2 last
    assert [h.id for h in rrf] == [3, 1, 2] and rrf[0].score == rrf[1].score
    # scores: 2 is all but the best on both sides (0.9875 + 0.9857), 1 and 3 are each best on one only
    assert [h.id for h in blend] == [2, 3, 1]
    assert blend[0].score == pytest.approx(0.9875 + 0.9857, abs=1e-3)


def test_a_blend_gives_each_side_its_weight_and_a_flat_side_its_whole_weight():
    flat = hits({1: 0.5, 2: 0.5})
    blend = fuse([(hits({1: 3.0, 2: 1.0}), 2.0), (flat, 0.5)], Fusion(mode="blend"), 2)
    assert [(h.id, h.score) for h in blend] == [(1, 2.5), (2, 0.5)]


def test_each_hit_keeps_the_meaning_legs_own_score_as_its_cosine():
    """A hit's relevance is judged by the meaning leg's score of it, not by its fused rank (none when the
    meaning leg did not have it among its candidates, or there was none)."""
    fused = fuse([(WORDS, 1.0), (hits({3: 0.80, 2: 0.79}), 1.0)], Fusion(k=2), 3, meaning=1)
    assert {h.id: h.cosine for h in fused} == {1: None, 2: 0.79, 3: 0.80}
    assert [h.cosine for h in fuse([(MEANING, 1.0)], Fusion(), 3, meaning=0)] == [0.80, 0.79, 0.10]
    assert [h.cosine for h in fuse([(WORDS, 1.0)], Fusion(), 3)] == [None, None, None]
