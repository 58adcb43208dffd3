"""The policy type: a load's draft budget, the named policies, the file and its errors."""

import json

import pytest

from speculab.policy.table import BudgetRule, Load, SpeculationPolicy, named_policy, read_policy


def test_a_load_takes_the_last_rule_it_reaches():
    policy = SpeculationPolicy((BudgetRule(2, 0, 3), BudgetRule(2, 4096, 5), BudgetRule(8, 0, 0)))
    assert [policy.draft_budget(Load(b)) for b in (1, 2, 7, 8, 16)] == [None, 3, 3, 0, 0]
    assert policy.draft_budget(Load(4, 5000)) == 5  # a long context at batch 2-7
    assert policy.draft_budget(Load(1, 5000)) is None  # below every rule's batch size: no budget
    assert policy.draft_budget(Load(8, 5000)) == 0  # a rule at a larger batch size holds at every context length
    assert policy.keys_on_context and not SpeculationPolicy.by_batch_size({1: 2}).keys_on_context


def test_the_file_round_trips_and_reads_the_earlier_batch_table():
    policy = SpeculationPolicy((BudgetRule(1, 0, 4), BudgetRule(1, 2048, 6), BudgetRule(4, 0, 2)), min_acceptance=0.3)
    written = json.loads(json.dumps(policy.to_dict()))
    assert written["draft_budget"][1] == {"batch_size": 1, "draft_nodes": 6, "context_len": 2048}
    assert "context_len" not in written["draft_budget"][0]  # 0, the default, is left out
    assert SpeculationPolicy.from_dict(written) == policy
    earlier = {"by_batch_size": {"4": 2, "1": 4}, "min_acceptance": 0.3}  # tuned files and results of earlier versions
    assert SpeculationPolicy.from_dict(earlier) == SpeculationPolicy.by_batch_size({1: 4, 4: 2}, min_acceptance=0.3)


def test_the_named_policies():
    assert SpeculationPolicy.shared(4) == SpeculationPolicy.by_batch_size({1: 4, 2: 2, 3: 1})
    assert [SpeculationPolicy.shared(12).draft_budget(Load(b)) for b in (1, 2, 3, 4, 5, 6, 7, 12, 13, 99)] == [
        12,
        6,
        4,
        3,
        2,
        2,
        1,
        1,
        1,
        1,
    ]
    assert SpeculationPolicy.plain_above(8).rules == (BudgetRule(9, 0, 0),)
    assert read_policy("shared:4") == named_policy("shared:4") == SpeculationPolicy.shared(4)
    assert named_policy("policy.json") is None and named_policy("other:4") is None
    for text, message in [("shared:0", "at least 1"), ("plain_above:0", "at least 1"), ("shared:x", "takes an integer")]:
        with pytest.raises(ValueError, match=message):
            read_policy(text)


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"draft_budget": [{"batch_size": 4, "draft_nodes": -1}]}', "draft_nodes >= 0"),
        ('{"draft_budget": [{"batch_size": 0, "draft_nodes": 2}]}', "batch_size must be >= 1"),
        ('{"draft_budget": [{"batch_size": 1, "draft_nodes": 2}, {"batch_size": 1, "draft_nodes": 3}]}', "distinct"),
        ('{"draft_budget": [{"batch_size": "a", "draft_nodes": 2}]}', "must be integers"),
        ('{"draft_budget": [{"batch_size": 1, "nodes": 2}]}', "each rule is"),
        ('{"draft_budget": {"1": 2}}', "must be a list"),
        ('{"by_batch_size": {"a": 2}}', "must be integers"),
        ('{"min_acceptance": 2}', r"min_acceptance must be in \[0, 1\]"),
        ('{"window": 0}', "window must be >= 1"),
        ('{"max_nodes": 2}', "unknown policy keys: max_nodes"),
        ("[1, 2]", "one JSON object"),
        ("{not json", "Expecting property name"),
    ],
)
def test_a_bad_policy_file_is_a_clear_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "policy.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as caught:
        read_policy(str(path))
    assert str(path) in str(caught.value)


def test_a_missing_file_names_itself(tmp_path):
    with pytest.raises(ValueError, match="policy.json"):
        read_policy(str(tmp_path / "policy.json"))


def test_a_rule_at_a_larger_batch_size_holds_at_every_context_length():
    """Batch size first: (1, 4096, 5) lifts long contexts below batch 4, and (4, 0, 1) then holds for every context
    length from batch 4 on, long ones included, unless a rule (4, C, n) says otherwise."""
    policy = SpeculationPolicy((BudgetRule(1, 0, 3), BudgetRule(1, 4096, 5), BudgetRule(4, 0, 1)))
    assert [policy.draft_budget(Load(b, c)) for b, c in ((2, 100), (2, 5000), (8, 100), (8, 5000))] == [3, 5, 1, 1]
    both = SpeculationPolicy((*policy.rules, BudgetRule(4, 4096, 2)))
    assert both.draft_budget(Load(8, 5000)) == 2


def test_a_policy_value_is_read_in_any_case_and_none_is_off():
    from speculab.policy.table import policy_value

    assert [policy_value(v) for v in ("off", "OFF", "none", "", "Auto", "shared:4")] == [None, None, None, None, "auto", "shared:4"]
    with pytest.raises(ValueError, match="window must be a number"):
        SpeculationPolicy.from_dict({"window": None})


# -- a tuner's grid of (batch size, context length) points: by_load ----------------------------------------------------
def _full(grid: dict) -> SpeculationPolicy:
    """A rule at every point of the grid: the lookup by_load must keep, with fewer rules."""
    return SpeculationPolicy(tuple(BudgetRule(b, c, n) for (b, c), n in sorted(grid.items())))


def _probes(grid: dict) -> list[Load]:
    """Every corner of the grid, a step past it each way, and far beyond."""
    sizes = sorted({b for b, _ in grid} | {1, 10_000})
    lengths = sorted({c for _, c in grid} | {0, 1_000_000})
    return [Load(b + d, max(0, c + e)) for b in sizes for c in lengths for d in (0, 1) for e in (-1, 0, 1)]


def test_by_load_keeps_every_grid_corners_budget_with_the_fewest_rules():
    """Two contexts, the longer from 2600 tokens: a rule where the rules so far give another budget, no other."""
    grid = {(1, 0): 3, (1, 2600): 3, (4, 0): 2, (4, 2600): 3, (8, 0): 2, (8, 2600): 1}
    policy = SpeculationPolicy.by_load(grid)
    assert policy.rules == (BudgetRule(1, 0, 3), BudgetRule(4, 0, 2), BudgetRule(4, 2600, 3), BudgetRule(8, 2600, 1))
    assert {point: policy.draft_budget(Load(*point)) for point in grid} == grid
    assert [policy.draft_budget(load) for load in _probes(grid)] == [_full(grid).draft_budget(load) for load in _probes(grid)]
    # between and beyond the corners: the nearest corner below each way
    assert policy.draft_budget(Load(6, 5000)) == 3 and policy.draft_budget(Load(100, 2599)) == 2 and policy.draft_budget(Load(9, 9999)) == 1


def test_by_load_on_one_context_is_by_batch_size():
    table = {1: 3, 2: 3, 4: 1, 8: 1, 16: 0}
    assert SpeculationPolicy.by_load({(b, 0): n for b, n in table.items()}) == SpeculationPolicy.by_batch_size(table)
    assert SpeculationPolicy.by_load({(b, 0): n for b, n in table.items()}).to_dict() == SpeculationPolicy.by_batch_size(table).to_dict()


@pytest.mark.parametrize("seed", range(40))
def test_by_load_reproduces_random_grids_at_every_corner_and_beyond(seed):
    """Whole grids (each corner's budget is its own) and grids with holes and no rule at context 0 (the lookup of a rule
    at each point, kept)."""
    import random

    rng = random.Random(seed)
    sizes = sorted(rng.sample([1, 2, 3, 4, 6, 8, 12, 16, 32], rng.randint(1, 6)))
    lengths = sorted(rng.sample([0, 700, 1500, 2600, 4000, 7000], rng.randint(1, 4)))
    grid = {(b, c): rng.randint(0, 3) for b in sizes for c in lengths}
    if seed % 2:
        grid = {point: n for point, n in grid.items() if rng.random() < 0.7} or {(sizes[0], lengths[0]): 1}
    policy = SpeculationPolicy.by_load(grid)
    assert [policy.draft_budget(load) for load in _probes(grid)] == [_full(grid).draft_budget(load) for load in _probes(grid)]
    if len(grid) == len(sizes) * len(lengths) and lengths[0] == 0:
        assert all(policy.draft_budget(Load(b, c)) == n for (b, c), n in grid.items())
    assert len(policy.rules) <= len(grid)


def test_the_contexts_a_policy_was_tuned_at_are_kept_in_its_file_and_change_nothing_it_does():
    policy = SpeculationPolicy.by_load({(1, 0): 3, (1, 2600): 1}, tuned_contexts=("workload", "4096"))
    written = policy.to_dict()
    assert written["tuned_contexts"] == ["workload", "4096"]
    read = SpeculationPolicy.from_dict(json.loads(json.dumps(written)))
    assert read.tuned_contexts == ("workload", "4096") and read == SpeculationPolicy.by_load({(1, 0): 3, (1, 2600): 1})
    assert "tuned_contexts" not in SpeculationPolicy.by_batch_size({1: 2}).to_dict()  # the file as it was
    with pytest.raises(ValueError, match="tuned_contexts must be a list"):
        SpeculationPolicy.from_dict({"tuned_contexts": "4096"})
