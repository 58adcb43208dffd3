"""A tuned policy as the engines would run it: ``speculab launch``'s own flags, with what each engine cannot express."""

import json

from speculab.methods import parse_method, without_policy
from speculab.policy.table import SpeculationPolicy
from speculab.tune.engine_settings import engine_settings


def settings_for(tmp_path, method: str, policy: SpeculationPolicy) -> dict:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy.to_dict()))
    return engine_settings(without_policy(parse_method(method)), path)


def vllm_config(said: dict) -> dict:
    return json.loads(said["vllm"]["settings"].split("'")[1])


def test_a_policy_that_stops_drafting_at_a_batch_size(tmp_path):
    said = settings_for(tmp_path, "eagle:topk=1", SpeculationPolicy.by_batch_size({1: 3, 4: 1, 8: 0}))
    config = vllm_config(said)
    assert config["method"] == "eagle" and config["num_speculative_tokens"] == 3
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 7, 1], [8, 8, 0]]
    assert any("chains only" in n for n in said["vllm"]["notes"])
    assert "--speculative-adaptive" in said["sglang"]["settings"]
    (text,) = said["sglang"]["files"].values()
    assert json.loads(text) == {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}}


def test_what_an_engine_cannot_express_is_said_beside_the_part_it_runs(tmp_path):
    floor = settings_for(tmp_path, "ngram", SpeculationPolicy.by_batch_size({1: 4, 8: 1}, min_acceptance=0.3))
    assert vllm_config(floor)["num_speculative_tokens_per_batch_size"] == [[1, 7, 4], [8, 8, 1]]
    assert any("min_acceptance" in n and "left out" in n for n in floor["vllm"]["notes"])
    assert "--speculative-num-draft-tokens '5'" in floor["sglang"]["settings"]  # NGRAM: 4 at every batch size
    assert any("NGRAM drafts as many tokens" in n for n in floor["sglang"]["notes"])
    tree = settings_for(tmp_path, "eagle", SpeculationPolicy.by_batch_size({1: 3, 4: 1}))  # topk 2: SGLang's tree kept
    assert "--speculative-adaptive" not in tree["sglang"]["settings"] and any("adapts chains only" in n for n in tree["sglang"]["notes"])


def test_a_policy_of_plain_decoding_everywhere(tmp_path):
    said = settings_for(tmp_path, "draft", SpeculationPolicy.by_batch_size({1: 0}))
    assert said["vllm"]["settings"] == said["sglang"]["settings"] == "none: plain decoding"
