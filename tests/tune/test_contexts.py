"""The contexts a tune measures: their values, their thresholds, and the one policy their choices make."""

import pytest

from speculab.bench.contexts import MAX
from speculab.bench.workload import WorkloadItem
from speculab.policy.table import Load, SpeculationPolicy
from speculab.tune.contexts import (
    WORKLOAD_ONLY,
    TuneContext,
    context_parts,
    context_policy,
    one_per_language,
    parse_contexts,
    thresholds,
    tuned_contexts,
)


def _context(asked, lengths: list[int], sizes=(1, 16)) -> TuneContext:
    return TuneContext(
        asked, asked if isinstance(asked, int) else None, tuple(sizes), [[7] * n for n in lengths], ["python"] * len(lengths)
    )


def test_context_values_are_benchs_and_bad_ones_name_the_flag():
    assert parse_contexts(None) == WORKLOAD_ONLY == ((None, None),)
    assert parse_contexts(["workload", "4k@1,16", "max", "4096"]) == ((None, None), (4096, (1, 16)), (MAX, None))  # 4096 once
    for bad in (["4kk"], ["long"], ["0"], ["4k@"], ["4k@0"], ["4k@a"]):
        with pytest.raises(ValueError, match="--contexts"):
            parse_contexts(bad)


def test_thresholds_are_midpoints_between_neighbouring_medians():
    workload, mid, long = _context(None, [900, 1200, 1500]), _context(4096, [4090, 4096, 4096]), _context(8000, [7990, 8000])
    # asked in any order; each threshold is the midpoint (rounded down) of its median and the next shorter one's
    assert thresholds([long, workload, mid]) == {"workload": 0, "4096": (1200 + 4096) // 2, "8000": (4096 + 8000) // 2}
    assert thresholds([mid]) == {"4096": 0}  # the shortest holds from 0
    assert tuned_contexts([workload]) == () and tuned_contexts([workload, mid]) == ("workload", "4096")


def test_one_policy_gives_each_load_its_nearest_measured_contexts_budget():
    """The workload's own measured at 1, 2, 4, 8, 16 and 4k at 1 and 16: a load takes the nearest context's budget
    at the batch size, and 4k's budget at batch 1 holds up to 16 (its own next measured batch size)."""
    starts = {"workload": 0, "4096": 2648}
    budgets = {"workload": {1: 3, 2: 3, 4: 2, 8: 1, 16: 0}, "4096": {1: 3, 16: 2}}
    policy = context_policy(budgets, starts, ("workload", "4096"))
    for b in (1, 2, 3, 4, 8, 12, 16, 64):
        below = lambda table: table[max(m for m in table if m <= b)]  # noqa: E731
        assert policy.draft_budget(Load(b, 1200)) == below(budgets["workload"]), b
        assert policy.draft_budget(Load(b, 2647)) == below(budgets["workload"]), b
        assert policy.draft_budget(Load(b, 2648)) == below(budgets["4096"]), b
        assert policy.draft_budget(Load(b, 9000)) == below(budgets["4096"]), b
    assert policy.keys_on_context and policy.tuned_contexts == ("workload", "4096")
    # the workload's own alone: the policy by batch size, as before a tune took contexts
    alone = context_policy({"workload": budgets["workload"]}, {"workload": 0}, ())
    assert alone.to_dict() == SpeculationPolicy.by_batch_size(budgets["workload"]).to_dict()


def test_a_long_context_below_its_smallest_batch_size_takes_the_shorter_contexts_budget():
    policy = context_policy({"workload": {1: 3, 4: 1}, "4096": {4: 0}}, {"workload": 0, "4096": 2600}, ("workload", "4096"))
    assert [policy.draft_budget(Load(b, 4000)) for b in (1, 2, 4, 8)] == [3, 3, 0, 0]


def test_one_request_a_language_and_a_record_read_by_context():
    domains = [("python", ""), ("sql", ""), ("python", ""), ("agentic", "python"), ("agentic", "typescript")]
    items = [WorkloadItem(f"p{i}", d, "refactor", (("user", "w5"),), lang) for i, (d, lang) in enumerate(domains)]
    assert [i.id for i in one_per_language(items)] == ["p0", "p1", "p4"]  # an agentic conversation is of its language
    flat = {"batch_sizes": [1], "chosen": {"1": 2}, "check": {}, "method": "ngram"}
    assert context_parts(flat) == {"workload": {"batch_sizes": [1], "chosen": {"1": 2}, "check": {}}}
    assert context_parts({"contexts": {"4096": flat}}) == {"4096": flat}
