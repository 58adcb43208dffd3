"""A tuned policy said in vLLM's and SGLang's settings, with what each cannot express."""

import json

from speculab.methods import parse_method
from speculab.speculative.policy import SpeculationPolicy
from speculab.tune.engines import engine_settings


def vllm_config(said: dict) -> dict:
    return json.loads(said["vllm"]["settings"].split("'")[1])


def test_a_policy_that_stops_drafting_at_a_batch_size():
    policy = SpeculationPolicy(((1, 3), (4, 1), (8, 0)))
    assert policy.ranges() == [[1, 3, 3], [4, 7, 1], [8, 8, 0]]  # vLLM carries the last K past the last range
    said = engine_settings(parse_method("eagle"), policy)
    config = vllm_config(said)
    assert config["method"] == "eagle" and config["num_speculative_tokens"] == 3
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 7, 1], [8, 8, 0]]
    assert "chains" in said["vllm"]["cannot"] and "acceptance" in said["vllm"]["cannot"]
    assert (
        '--speculative-adaptive-config FILE with {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}}'
        in said["sglang"]["settings"]
    )


def test_a_policy_of_plain_decoding_everywhere():
    said = engine_settings(parse_method("draft"), SpeculationPolicy(((1, 0),)))
    assert "plain decoding" in said["vllm"]["settings"] and "plain decoding" in said["sglang"]["settings"]


def test_a_fixed_cap_needs_no_schedule_and_a_chain_method_cannot_vary_in_sglang():
    fixed = engine_settings(parse_method("ngram"), SpeculationPolicy(((1, 4),)))
    assert "num_speculative_tokens_per_batch_size" not in vllm_config(fixed) and "NGRAM" in fixed["sglang"]["settings"]
    varying = engine_settings(parse_method("draft"), SpeculationPolicy(((1, 3), (8, 0))))
    assert vllm_config(varying)["num_speculative_tokens_per_batch_size"] == [[1, 7, 3], [8, 8, 0]]
    assert "STANDALONE" in varying["sglang"]["settings"] and "changes with the batch size" in varying["sglang"]["cannot"]


def test_no_cap_below_the_first_entry_is_the_most_in_vllm():
    assert SpeculationPolicy(((4, 2),)).ranges() == [[1, 3, 2], [4, 4, 2]]
