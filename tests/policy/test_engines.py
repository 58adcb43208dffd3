"""A policy in vLLM's and SGLang's settings: the one translation, and what each engine cannot express."""

import json
from pathlib import Path

import pytest
from packaging.version import Version

from speculab.launch import vllm
from speculab.launch.command import LaunchRequest, UnsupportedLaunch
from speculab.methods import parse_method
from speculab.policy.engines import chain_tokens, per_batch_size, sglang_budget, vllm_budget
from speculab.policy.table import BudgetRule, SpeculationPolicy


def test_a_budget_is_vllms_k_and_never_more_than_the_chain():
    assert chain_tokens(3) == 3
    policy = SpeculationPolicy.by_batch_size({1: 3, 4: 1, 8: 0})
    said = vllm_budget(policy, chain=3)
    assert said.config == {"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 7, 1], [8, 8, 0]]}
    assert not said.cannot and not said.plain
    shared = vllm_budget(SpeculationPolicy.shared(4), chain=3)  # 4 nodes at batch 1 is the whole 3-token chain
    assert shared.config["num_speculative_tokens_per_batch_size"] == [[1, 1, 3], [2, 2, 2], [3, 3, 1]]
    assert per_batch_size(SpeculationPolicy((BudgetRule(4, 0, 2),)), nodes=5) == [(1, 5), (4, 2)]  # no budget: the chain


def test_what_vllm_cannot_express():
    floor = vllm_budget(SpeculationPolicy.by_batch_size({1: 2}, min_acceptance=0.3), chain=4)
    assert floor.config == {"num_speculative_tokens": 2} and "min_acceptance" in floor.cannot[0]
    by_context = vllm_budget(SpeculationPolicy((BudgetRule(1, 0, 3), BudgetRule(1, 4096, 1))), chain=3)
    assert by_context.config == {"num_speculative_tokens": 3} and "context length" in by_context.cannot[0]
    assert vllm_budget(SpeculationPolicy.by_batch_size({1: 0}), chain=3).plain


def test_sglang_adapts_where_it_can_and_says_where_it_cannot():
    policy = SpeculationPolicy.by_batch_size({1: 3, 4: 1, 8: 0})
    adapts = sglang_budget(policy, nodes=3, cannot_adapt=None)
    assert adapts.adaptive == {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}}
    fixed = sglang_budget(policy, nodes=3, cannot_adapt="NGRAM drafts as many tokens at every batch size")
    assert fixed.adaptive is None and fixed.steps == 3 and "NGRAM" in fixed.cannot[0]
    constant = sglang_budget(SpeculationPolicy.by_batch_size({1: 2}), nodes=4, cannot_adapt="never")
    assert constant.steps == 2 and constant.adaptive is None and not constant.cannot


def test_a_policy_tuned_at_two_contexts_is_said_to_be_beyond_vllm_and_sglang(tmp_path):
    """What ``speculab tune --contexts`` writes (``by_load``): vLLM and SGLang key speculation on batch size only, so
    the budgets keyed on context length are named as what they cannot express, and the short-context rules are kept;
    a launch that asked for the policy itself is refused."""
    grid = {(1, 0): 3, (4, 0): 1, (16, 0): 0, (1, 2648): 3, (4, 2648): 3, (16, 2648): 2}
    policy = SpeculationPolicy.by_load(grid, tuned_contexts=("workload", "4096"))
    assert policy.keys_on_context
    said = vllm_budget(policy, chain=3)
    assert said.config == {"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 15, 1], [16, 16, 0]]}
    assert any("keyed on context length" in c and "vLLM keys speculation on batch size only" in c for c in said.cannot)
    assert any("keyed on context length" in c for c in sglang_budget(policy, nodes=3, cannot_adapt=None).cannot)
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy.to_dict()))
    spec = parse_method(f"ngram:num_speculative_tokens=3,policy={path}")
    with pytest.raises(UnsupportedLaunch, match="cannot express a budget keyed on context length"):
        vllm.vllm_command(LaunchRequest("vllm", spec, Path("/t"), None, Version("0.32.0")))
    lenient = vllm.vllm_command(LaunchRequest("vllm", spec, Path("/t"), None, Version("0.32.0"), strict_policy=False))
    assert any("keyed on context length" in n and "left out" in n for n in lenient.notes)
