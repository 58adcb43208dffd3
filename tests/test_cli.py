"""The command line, end to end, on a tiny checkpoint folder and on the embedded model."""

import json
import subprocess
import sys

import pytest

from speculab.cli import main
from tests.helpers import save_tiny_checkpoint


def test_generate_json_on_a_local_checkpoint(tmp_path, capsys):
    save_tiny_checkpoint(tmp_path)
    code = main(
        ["generate", "--model", str(tmp_path), "--prompt", "w5 w9 w11", "--max-tokens", "6", "--ignore-eos", "--json", "--dtype", "float32"]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["num_tokens"] == 6 and result["prompt_tokens"] == 3
    assert result["finish_reason"] == "length"
    assert isinstance(result["text"], str) and result["text"]


def test_generate_streams_text_and_chat(tmp_path, capsys):
    save_tiny_checkpoint(tmp_path)
    assert main(["generate", "--model", str(tmp_path), "--prompt", "w5", "--chat", "--max-tokens", "4", "--ignore-eos"]) == 0
    assert capsys.readouterr().out.strip()


def test_clear_error_for_bad_model_folder(tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path / "missing"), "--prompt", "x"]) == 2
    assert "not a checkpoint folder" in capsys.readouterr().err


@pytest.mark.slow
def test_generate_embedded_model_subprocess():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "speculab.cli",
            "generate",
            "--chat",
            "--prompt",
            "Write a Python function that reverses a string.",
            "--max-tokens",
            "24",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # 24 tokens unless the model stopped first, and the reason says which
    assert (result["finish_reason"], result["num_tokens"] == 24) in {("length", True), ("stop", False)}, result
    assert 0 < result["num_tokens"] <= 24
    assert "def" in result["text"] or "reverse" in result["text"].lower()


@pytest.mark.parametrize(
    "method,extra",
    [
        ("ngram", []),
        ("suffix", []),
        ("draft", ["--draft", "SELF"]),
        ("eagle", ["--eagle", "HEAD", "--topk", "2", "--num-steps", "3", "--num-draft-tokens", "6"]),
        ("eagle3", ["--eagle", "HEAD3", "--topk", "2", "--num-steps", "3", "--num-draft-tokens", "6"]),
    ],
)
def test_generate_speculative_compare_baseline_fp32_is_identical(tmp_path, capsys, method, extra):
    from tests.helpers import tiny_hf_model, write_eagle3_head, write_eagle_head

    save_tiny_checkpoint(tmp_path / "target")
    write_eagle_head(tmp_path / "head", tiny_hf_model().config)
    write_eagle3_head(tmp_path / "head3", tiny_hf_model().config)
    paths = {"SELF": tmp_path / "target", "HEAD": tmp_path / "head", "HEAD3": tmp_path / "head3"}
    extra = [str(paths[e]) if e in paths else e for e in extra]
    code = main(
        [
            "generate",
            "--model",
            str(tmp_path / "target"),
            "--prompt",
            "w5 w9 w11 w5 w9",
            "--max-tokens",
            "12",
            "--ignore-eos",
            "--json",
            "--dtype",
            "float32",
            "--method",
            method,
            "--compare-baseline",
            *extra,
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["identical"] is True and result["agreement"] == 1.0
    stats = result["spec_stats"]  # every output token after the prefill's came from a step: accepted or bonus
    assert stats["steps"] <= 11 <= stats["steps"] + stats["accepted_tokens"]
    assert result["mean_acceptance_length"] == pytest.approx((stats["accepted_tokens"] + stats["steps"]) / stats["steps"])
    assert result["speedup"] == pytest.approx(result["tokens_per_s"] / result["baseline_tokens_per_s"])
    assert result["method"] == method and result["num_tokens"] == 12


def test_generate_method_needs_its_checkpoint(tmp_path, capsys):
    save_tiny_checkpoint(tmp_path)
    assert main(["generate", "--model", str(tmp_path), "--prompt", "w5", "--method", "eagle"]) == 2
    assert "--eagle PATH" in capsys.readouterr().err


def test_compare_eagle_reference_needs_a_head(capsys):
    assert main(["compare", "eagle-reference", "--model", "default"]) == 2
    assert "--eagle PATH" in capsys.readouterr().err


def test_generate_method_specs_and_flags_share_bench_defaults(tmp_path, capsys):
    from speculab.methods import parse_method

    save_tiny_checkpoint(tmp_path)
    args = [
        "generate",
        "--model",
        str(tmp_path),
        "--prompt",
        "w5 w9 w5 w9 w5",
        "--max-tokens",
        "5",
        "--ignore-eos",
        "--json",
        "--dtype",
        "float32",
        "--method",
        "ngram:num_speculative_tokens=3",
        "--prompt-lookup-max",
        "4",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["label"] == parse_method("ngram:num_speculative_tokens=3,prompt_lookup_max=4").label
    assert result["label"] == "ngram(num_speculative_tokens=3,prompt_lookup_min=2,prompt_lookup_max=4)"


def test_generate_refuses_a_flag_the_method_does_not_take(tmp_path, capsys):
    save_tiny_checkpoint(tmp_path)
    assert main(["generate", "--model", str(tmp_path), "--prompt", "w5", "--method", "ngram", "--num-steps", "3"]) == 2
    assert "--num-steps does not apply to --method ngram" in capsys.readouterr().err
    assert main(["generate", "--model", str(tmp_path), "--prompt", "w5", "--method", "eagle"]) == 2
    assert "needs --eagle PATH" in capsys.readouterr().err


def test_generate_under_a_policy_file_and_off(tmp_path, capsys):
    """--policy FILE sets the method's draft budget (here: one node a request) and stays identical to the baseline;
    --policy off is no policy; a bad file is refused naming it."""
    save_tiny_checkpoint(tmp_path / "target")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"draft_budget": [{"batch_size": 1, "draft_nodes": 1}]}))
    base = ["generate", "--model", str(tmp_path / "target"), "--prompt", "w5 w9 w11 w5 w9 w11 w5", "--max-tokens", "12"]
    base += ["--ignore-eos", "--json", "--dtype", "float32", "--method", "ngram:prompt_lookup_min=1", "--compare-baseline"]
    assert main([*base, "--policy", str(policy)]) == 0
    capped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert capped["identical"] is True and f"policy={policy}" in capped["label"]
    assert 0 < capped["spec_stats"]["draft_tokens"] <= capped["spec_stats"]["steps"]  # at most one node a step
    assert main([*base, "--policy", "off"]) == 0
    free = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "policy" not in free["label"] and free["spec_stats"]["draft_tokens"] > capped["spec_stats"]["draft_tokens"]
    policy.write_text('{"draft_budget": [{"batch_size": 1, "draft_nodes": -2}]}')
    assert main([*base, "--policy", str(policy)]) == 2
    assert str(policy) in capsys.readouterr().err
