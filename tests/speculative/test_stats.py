"""Speculation statistics: per-depth counts and the conditional acceptance that shows where τ is lost."""

import pytest

from speculab.speculative.stats import SpecStats


def chain_steps(accepted_counts, k=3):
    stats = SpecStats()
    for accepted in accepted_counts:
        stats.record(k, k, accepted)
    return stats


def test_conditional_acceptance_of_chains():
    # four steps of a 3-token chain accepting 3, 1, 0, 2 tokens
    stats = chain_steps([3, 1, 0, 2])
    assert stats.accepted_per_position == [3, 2, 1]
    assert stats.drafted_per_position == [4, 4, 4]
    assert stats.reached_per_position == [4, 3, 2]  # depth d is tested only after depths < d were accepted
    assert stats.conditional_acceptance == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert stats.mean_acceptance_length == pytest.approx((6 + 4) / 4)


def test_a_leaf_ends_the_test_early_in_a_tree():
    """In a tree of depth 3, a path that ends at a depth-1 leaf never tests depth 2; one whose node has children does."""
    stats = SpecStats()
    stats.record(draft_size=6, depth=3, accepted=1, tested=1)  # the accepted node is a leaf: depth 2 never tested
    stats.record(draft_size=6, depth=3, accepted=1, tested=2)  # it had children, none right
    assert stats.reached_per_position == [2, 1]
    assert stats.conditional_acceptance == [1.0, 0.0]
    assert stats.drafted_per_position == [2, 2, 2]


def test_merge_and_since_keep_every_per_depth_count():
    a, b = chain_steps([3, 0]), chain_steps([1], k=5)
    merged = SpecStats()
    merged.merge(a)
    merged.merge(b)
    assert merged.accepted_per_position == [2, 1, 1]
    assert merged.drafted_per_position == [3, 3, 3, 1, 1]
    assert merged.reached_per_position == [3, 2, 1]
    delta = merged.since(a)
    assert (delta.accepted_per_position, delta.drafted_per_position, delta.reached_per_position) == ([1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0])
    assert delta.conditional_acceptance == [1.0, 0.0, 0.0]


def test_as_dict_names_the_per_depth_fields():
    record = chain_steps([2]).as_dict()
    assert record["conditional_acceptance"] == [1.0, 1.0, 0.0]
    assert record["reached_per_position"] == [1, 1, 1]
