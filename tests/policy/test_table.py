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
