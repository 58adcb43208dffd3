"""The one choosing rule: the smallest draft budget the measurement cannot tell from the best."""

import pytest

from speculab.policy.choice import Estimate, choose_budget


def test_the_smallest_budget_within_one_standard_error_of_the_best():
    level = [Estimate(0, 50, 1), Estimate(1, 60, 1), Estimate(2, 70, 1), Estimate(3, 70.5, 1)]
    assert choose_budget(level).draft_nodes == 2  # 3 is ahead by less than the spread of the difference
    clear = [Estimate(0, 100, 1), Estimate(1, 110, 1), Estimate(2, 130, 1)]
    assert choose_budget(clear).draft_nodes == 2
    noisy = [Estimate(0, 200, 40), Estimate(1, 210, 40)]
    assert choose_budget(noisy).draft_nodes == 0  # noise wider than the gain: plain decoding


def test_without_spread_any_gap_counts():
    assert choose_budget([Estimate(0, 50, 0), Estimate(1, 50.1, 0)]).draft_nodes == 1
    assert choose_budget([Estimate(0, 50, 0), Estimate(1, 50, 0)]).draft_nodes == 0
    assert Estimate(0, 50, 0).below(Estimate(1, 51, 0)) == float("inf")


def test_no_candidates_is_an_error():
    with pytest.raises(ValueError, match="no candidates"):
        choose_budget([])
