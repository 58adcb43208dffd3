"""A policy in vLLM's and SGLang's settings: the one translation, and what each engine cannot express."""

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
