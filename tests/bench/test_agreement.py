"""Prefix agreement: one definition for token ids and text, wherever a report states it."""

import pytest

from speculab.bench.agreement import first_difference, prefix_agreement


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference("abXd", "abcd") == 2
    assert first_difference([], []) is None


def test_tokens_and_text_count_the_same_way():
    assert prefix_agreement([[1, 2, 3, 4], [7, 8]], [[1, 2, 3, 4], [7, 8]]) == 1.0
    assert prefix_agreement(["abcd", "xy"], ["abcd", "xy"]) == 1.0
    assert prefix_agreement([[1, 2, 9, 4]], [[1, 2, 3, 4]]) == 0.5
    assert prefix_agreement(["abXd"], ["abcd"]) == 0.5
    # over all pairs, each counted by its longer side: (4 + 0) agreeing of (4 + 2)
    assert prefix_agreement([[1, 2, 3, 4], [5, 6]], [[1, 2, 3, 4], [6]]) == pytest.approx(4 / 6)
    # a prefix agrees up to its length, against the longer output
    assert prefix_agreement([[1, 2]], [[1, 2, 3, 4]]) == 0.5


def test_empty_outputs_agree():
    """Two empty outputs (a run stopped at once on both sides) agree: every caller used to say 0.0 or 1.0 differently."""
    assert prefix_agreement([[]], [[]]) == 1.0
    assert prefix_agreement([""], [""]) == 1.0
    assert prefix_agreement([], []) == 1.0
    assert prefix_agreement([[]], [[1]]) == 0.0


def test_unpaired_outputs_are_an_error():
    with pytest.raises(ValueError, match="2 outputs against 1 references"):
        prefix_agreement([[1], [2]], [[1]])
