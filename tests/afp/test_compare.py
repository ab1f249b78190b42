"""afp.compare: the one "same answer" check (the parity test and make docker-check use it)."""

from __future__ import annotations

import math

from afp.compare import SCORE_TOLERANCE, Tolerance, compare_answers


def test_scores_within_the_tolerance_are_the_same_and_the_largest_difference_is_reported():
    expected = {"key": "u", "best": {"words": ["a", "b"], "score": -10.0}, "nbest": [{"score": -10.0}, {"score": -12.5}]}
    got = {"key": "u", "best": {"words": ["a", "b"], "score": -10.0 + 2e-6}, "nbest": [{"score": -10.0},
                                                                                     {"score": -12.5 - 5e-5}]}
    found = compare_answers(expected, got)
    assert found.same
    assert math.isclose(found.largest, 5e-5, rel_tol=1e-6) and found.largest_at == ".nbest[1].score"


def test_a_score_off_by_more_than_the_tolerance_is_named_with_its_place():
    found = compare_answers([{"score": -10.0}], [{"score": -10.001}])
    assert not found.same and found.difference.startswith("[0].score: -10.0 != -10.001 (off by 0.001 > 0.0001)")


def test_words_counts_order_and_types_are_compared_exactly():
    assert compare_answers({"words": ["a"]}, {"words": ["b"]}).difference == ".words[0]: 'a' != 'b'"
    assert compare_answers({"tokens": 10}, {"tokens": 11}).difference == ".tokens: 10 != 11"
    assert compare_answers({"ok": True}, {"ok": 1}).difference == ".ok: True != 1"
    assert compare_answers([1, 2], [1, 2, 3]).difference == "answer: 2 items != 3"
    assert compare_answers([[1.0, 2.0]], [[2.0, 1.0]]).difference.startswith("[0][0]: 1.0 != 2.0")


def test_ignored_and_one_sided_keys_are_left_out():
    assert compare_answers({"seconds": 1.0, "a": 1}, {"seconds": 9.0, "a": 1, "extra": 3}, ignore={"seconds"}).same
    assert not compare_answers({"seconds": 1.0}, {"seconds": 9.0}).same


def test_long_sums_are_compared_relatively_and_infinities_by_sign():
    big = -123456.0
    assert compare_answers(big, big * (1 + 5e-7)).same  # 0.06 apart, 5e-7 relative
    assert not compare_answers(big, big * (1 + 5e-6)).same
    assert compare_answers(-math.inf, -math.inf).same and not compare_answers(-math.inf, math.inf).same
    assert compare_answers(math.nan, math.nan).same and not compare_answers(math.nan, 0.0).same
    assert Tolerance(absolute=1e-2).equal(1.0, 1.005) and not SCORE_TOLERANCE.equal(1.0, 1.005)
