"""Generated launch commands, checked against the flags each engine version's own parser defines.

The parsers of SGLang and of old vLLM versions are recorded in ``fixtures/`` (extracted from their
released sources by ``fixtures/extract_flags.py``); the installed vLLM's parser is checked for real
in ``test_vllm_real.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.version import Version

from speculab.launch import sglang, vllm
from speculab.launch.command import LaunchRequest, UnsupportedLaunch
from speculab.methods import parse_method
from speculab.policy.table import SpeculationPolicy

FIXTURES = Path(__file__).parent / "fixtures"
METHODS = ["baseline", "ngram", "suffix", "draft", "eagle", "eagle3"]
BUILDERS = {"vllm": vllm.vllm_command, "sglang": sglang.sglang_command}


def parser_of(engine: str, version: str) -> dict:
    return json.loads((FIXTURES / f"{engine}-{version}.json").read_text())


def request(engine: str, method: str, version: str, **extra) -> LaunchRequest:
    spec = parse_method(method if method in ("baseline", "ngram", "suffix", "draft", "eagle") else f"{method}:eagle=/heads/e3")
    drafter = None if spec.name in ("baseline", "ngram", "suffix") else Path(f"/exported/{spec.name}")
    return LaunchRequest(engine, spec, Path("/models/target"), drafter, Version(version), port=8123, **extra)


# what each recorded version cannot run, and the version that can
UNSUPPORTED = {
    ("vllm", "0.8.2", "eagle3"),
    ("sglang", "0.4.3.post2", "eagle3"),
    ("sglang", "0.4.3.post2", "draft"),
    ("sglang", "0.4.3.post2", "ngram"),
    ("sglang", "0.5.2", "ngram"),
    ("vllm", "0.8.2", "suffix"),
    ("vllm", "0.8.5", "suffix"),
    *(("sglang", version, "suffix") for version in ("0.4.3.post2", "0.5.2", "0.5.3", "0.5.23")),
}
# 0.8.5's SpeculativeConfig declares method as ngram/eagle/medusa/mlp_speculator/draft_model, yet its
# __post_init__ accepts "eagle3" (recorded in fixtures/PROVENANCE.md): a stale Literal, not a refusal
UNDECLARED_BUT_ACCEPTED = {("0.8.5", "eagle3")}
RECORDED = [("vllm", "0.8.2"), ("vllm", "0.8.5"), ("sglang", "0.4.3.post2"), ("sglang", "0.5.2"), ("sglang", "0.5.3"), ("sglang", "0.5.23")]


@pytest.mark.parametrize("engine,version", RECORDED)
@pytest.mark.parametrize("method", METHODS)
def test_every_flag_is_one_the_engine_version_defines(engine, version, method):
    parser = parser_of(engine, version)
    req = request(engine, method, version, tp=2, dtype="float32", max_model_len=2048)
    if (engine, version, method) in UNSUPPORTED:
        with pytest.raises(UnsupportedLaunch, match="arrived in|runs no|has no such"):
            BUILDERS[engine](req)
        return
    command = BUILDERS[engine](req)
    defined = set(parser["flags"])
    assert {f.name for f in command.flags} <= defined, sorted({f.name for f in command.flags} - defined)
    for flag in command.flags:
        choices = parser["choices"].get(flag.name)
        if choices is not None and flag.value is not None:
            assert flag.value in [str(c) for c in choices], (flag.name, flag.value, choices)
        assert flag.why  # every flag says why it is there
    config = next((json.loads(f.value) for f in command.flags if f.name == "--speculative-config"), None)
    if config is not None and parser.get("speculative_config_fields"):
        fields = parser["speculative_config_fields"]
        assert set(config) <= set(fields), sorted(set(config) - set(fields))
        if fields.get("method") and (version, config["method"]) not in UNDECLARED_BUT_ACCEPTED:
            assert config["method"] in fields["method"]


def test_vllm_v0_flags_and_v1_config():
    old = vllm.vllm_command(request("vllm", "ngram", "0.8.2"))
    assert old.argv[old.argv.index("--speculative-model") + 1] == "[ngram]"
    assert "--speculative-config" not in old.argv and "--use-v2-block-manager" not in old.argv
    eagle_old = vllm.vllm_command(request("vllm", "eagle", "0.8.2"))
    assert eagle_old.argv[eagle_old.argv.index("--speculative-draft-tensor-parallel-size") + 1] == "1"
    new = vllm.vllm_command(replace(request("vllm", "eagle", "0.32.0"), spec=parse_method("eagle:policy=off")))
    config = json.loads(new.argv[new.argv.index("--speculative-config") + 1])
    assert config == {"method": "eagle", "model": "/exported/eagle", "num_speculative_tokens": 3}  # the spec's depth: a chain
    # EAGLE's default policy, shared:4, as vLLM's k per batch size (never more than the chain of 3)
    shared = vllm.vllm_command(request("vllm", "eagle", "0.32.0"))
    per_batch = json.loads(shared.argv[shared.argv.index("--speculative-config") + 1])["num_speculative_tokens_per_batch_size"]
    assert per_batch == [[1, 1, 3], [2, 2, 2], [3, 3, 1]]
    older = vllm.vllm_command(request("vllm", "eagle", "0.23.0"))  # before vLLM's per-batch-size k: left out, said
    assert json.loads(older.argv[older.argv.index("--speculative-config") + 1]) == config
    assert any("shared:4" in n and "left out" in n for n in older.notes)
    draft = json.loads(vllm.vllm_command(request("vllm", "draft", "0.32.0")).flags[-1].value)
    assert draft["method"] == "draft_model" and draft["num_speculative_tokens"] == 3


def test_vllm_versions_without_draft_models_or_eagle3_say_which_version_has_them():
    with pytest.raises(UnsupportedLaunch, match="0.14"):
        vllm.vllm_command(request("vllm", "draft", "0.12.0"))
    plain_above = vllm.vllm_command(LaunchRequest("vllm", parse_method("ngram:policy=plain_above:4"), Path("/t"), None, Version("0.32.0")))
    config = json.loads(plain_above.flags[-1].value)
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 4, 4], [5, 5, 0]]  # vLLM V1's disable_by_batch_size


def test_sglang_flags_come_together_and_the_token_map_is_passed():
    command = sglang.sglang_command(request("sglang", "eagle", "0.5.23", token_map=Path("/exported/eagle/token_map.pt")))
    argv = command.argv
    assert argv[:4] == ["python", "-m", "sglang.launch_server", "--model-path"]
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--enable-metrics"):
        assert flag in argv
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE"
    assert argv[argv.index("--speculative-token-map") + 1] == "/exported/eagle/token_map.pt"
    assert "--speculative-draft" not in argv  # only ever an argparse prefix
    standalone = sglang.sglang_command(request("sglang", "draft", "0.5.2")).argv
    assert standalone[standalone.index("--speculative-algorithm") + 1] == "STANDALONE"
    assert standalone[standalone.index("--speculative-eagle-topk") + 1] == "1"


def test_the_plan_explains_each_flag_and_pastes_as_one_line():
    req = request("vllm", "ngram", "0.32.0", cpu=True, program=("/env/bin/python", "-m", "vllm.entrypoints.openai.api_server"))
    command = vllm.vllm_command(req)
    line = command.shell()
    assert line.startswith("HF_HUB_OFFLINE=1 ") and "LD_PRELOAD=/env/lib/libiomp5.so" in line
    assert "--enforce-eager" in line and '\'{"method":"ngram"' in line  # the JSON is quoted for a shell
    text = command.explain()
    for flag in command.flags:
        assert f"# {flag.why}" in text
    assert "(not disable_by_batch_size" in text


def test_a_policy_sglang_cannot_express_is_refused_and_one_it_can_is_adaptive(tmp_path):
    with pytest.raises(UnsupportedLaunch, match="NGRAM drafts as many tokens at every batch size"):
        BUILDERS["sglang"](LaunchRequest("sglang", parse_method("ngram:policy=shared:4"), Path("/t"), None, Version("0.5.23")))
    chain = parse_method("eagle:eagle=/heads/e,topk=1,policy=shared:4")
    command = BUILDERS["sglang"](LaunchRequest("sglang", chain, Path("/t"), Path("/h"), Version("0.5.23"), run_dir=tmp_path))
    argv = command.argv
    assert "--speculative-adaptive" in argv and argv[argv.index("--speculative-eagle-topk") + 1] == "1"
    ((path, text),) = command.files
    assert argv[argv.index("--speculative-adaptive-config") + 1] == str(path) and path.parent == tmp_path
    assert json.loads(text) == {"1": {"candidate_steps": [3]}, "2": {"candidate_steps": [2]}, "3": {"candidate_steps": [1]}}
    mine = parse_method("eagle:eagle=/heads/e,topk=1,policy=shared:3")  # not the default: refused where it cannot run
    with pytest.raises(UnsupportedLaunch, match="--speculative-adaptive arrived after 0.5.3"):
        BUILDERS["sglang"](LaunchRequest("sglang", mine, Path("/t"), Path("/h"), Version("0.5.3")))
    older = BUILDERS["sglang"](LaunchRequest("sglang", chain, Path("/t"), Path("/h"), Version("0.5.3")))  # the default: said
    assert "--speculative-adaptive" not in older.argv and any("shared:4" in n for n in older.notes)
    tree = BUILDERS["sglang"](request("sglang", "eagle", "0.5.23"))  # the default tree under its default shared:4
    assert "--speculative-adaptive" not in tree.argv and any("shared:4" in n and "left out" in n for n in tree.notes)
    assert tree.argv[tree.argv.index("--speculative-eagle-topk") + 1] == "2"


def test_a_policy_becomes_vllms_schedule_from_the_version_that_has_one(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(SpeculationPolicy.by_batch_size({1: 3, 4: 1, 8: 0}).to_dict()))
    spec = parse_method(f"ngram:num_speculative_tokens=3,policy={policy}")
    command = vllm.vllm_command(LaunchRequest("vllm", spec, Path("/t"), None, Version("0.32.0")))
    (flag,) = [f for f in command.flags if f.name == "--speculative-config"]
    config = json.loads(flag.value)
    assert config["num_speculative_tokens"] == 3 and config["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 7, 1], [8, 8, 0]]
    assert "per batch size" in flag.why
    for version in ("0.23.0", "0.8.2"):
        with pytest.raises(UnsupportedLaunch, match=r"num_speculative_tokens_per_batch_size arrived in 0.24.0"):
            vllm.vllm_command(LaunchRequest("vllm", spec, Path("/t"), None, Version(version)))
    policy.write_text(json.dumps(SpeculationPolicy.by_batch_size({1: 3}, min_acceptance=0.3).to_dict()))
    with pytest.raises(UnsupportedLaunch, match="a floor on each request's own acceptance"):
        vllm.vllm_command(LaunchRequest("vllm", spec, Path("/t"), None, Version("0.32.0")))
    with pytest.raises(UnsupportedLaunch, match="pass the policy file"):
        vllm.vllm_command(LaunchRequest("vllm", parse_method("ngram:policy=auto"), Path("/t"), None, Version("0.32.0")))


def test_what_a_policy_narrows_or_cannot_mean_on_vllm_is_said(tmp_path):
    plain_above = vllm.vllm_command(LaunchRequest("vllm", parse_method("ngram:policy=plain_above:4"), Path("/t"), None, Version("0.32.0")))
    assert any("k = 0 from batch 5" in n for n in plain_above.notes)  # vLLM's k = 0 keeps its speculative step's costs
    wide = LaunchRequest("vllm", parse_method("eagle:num_steps=5,topk=8,num_draft_tokens=32"), Path("/t"), Path("/h"), Version("0.32.0"))
    notes = vllm.vllm_command(wide).notes
    assert any("its policy drafts at most 4 of the spec's chain of 5" in n for n in notes)


def test_an_sglang_chain_never_drafts_deeper_than_its_steps(tmp_path):
    chain = parse_method("eagle:eagle=/heads/e,topk=1,num_steps=3,num_draft_tokens=8,policy=shared:8")
    command = BUILDERS["sglang"](LaunchRequest("sglang", chain, Path("/t"), Path("/h"), Version("0.5.23"), run_dir=tmp_path))
    argv = command.argv
    assert argv[argv.index("--speculative-num-steps") + 1] == "3" and argv[argv.index("--speculative-num-draft-tokens") + 1] == "4"
    ((path, text),) = command.files
    assert json.loads(text)["1"] == {"candidate_steps": [3]} and path.name.startswith("sglang-adaptive-")
    assert command.record()["files"] == {str(path): text}


def test_vllm_cpu_threads_are_pinned_to_each_ranks_share_of_the_cores():
    assert vllm.omp_binding(1, [0, 1]) == "0,1"
    assert vllm.omp_binding(2, [0, 1]) == "0|1"
    assert vllm.omp_binding(2, [4, 5, 6, 7]) == "4,5|6,7"
    assert vllm.omp_binding(4, [0, 1]) == "nobind"  # fewer cores than ranks: vLLM's threads left where they fall


def test_vllm_cpus_kv_cache_is_the_one_asked_else_a_gibibyte():
    def space(**extra) -> str:
        command = vllm.vllm_command(request("vllm", "baseline", "0.10.0", cpu=True, **extra))
        return next(f.value for f in command.env if f.name == "VLLM_CPU_KVCACHE_SPACE")

    assert space() == "1" and space(kv_cache_gib=3, max_model_len=4352) == "3"
