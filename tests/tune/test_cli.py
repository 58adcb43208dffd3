"""``speculab tune`` end to end on a tiny checkpoint, and ``--policy auto`` reading what it wrote."""

import json

import pytest

from speculab.cli import main
from speculab.methods import POLICY, parse_method, proposer_options
from speculab.policy.store import file_stem, tuned_paths
from speculab.policy.table import Load, SpeculationPolicy
from speculab.runtime import load
from tests.helpers import save_tiny_checkpoint

METHOD = "ngram:prompt_lookup_min=1"


@pytest.fixture
def target(tmp_path, monkeypatch):
    monkeypatch.setattr("speculab.policy.store.cache_dir", lambda: tmp_path / "cache")  # not SPECULAB_CACHE: the native build lives there
    return save_tiny_checkpoint(tmp_path / "target")


def test_policy_auto_before_tune_says_what_to_run(target, capsys):
    generate = ["generate", "--model", str(target), "--prompt", "w5 w9 w5 w9", "--max-tokens", "4", "--dtype", "float32"]
    assert main([*generate, "--method", METHOD, "--policy", "auto"]) == 2
    assert f"run `speculab tune --method {METHOD}`" in capsys.readouterr().err


def short_workload(folder) -> str:
    """Prompts the tiny model's 512 positions hold, in two domains, repetitive enough for n-gram drafts."""
    path = folder / "workload.jsonl"
    texts = ["w5 w9 w11 w5 w9 w11 w5 w9", "w7 w3 w7 w3 w7 w3", "w8 w2 w6 w8 w2 w6 w8"]
    path.write_text(
        "".join(json.dumps({"id": f"p{i}", "domain": ("python", "sql")[i % 2], "prompt": t}) + "\n" for i, t in enumerate(texts))
    )
    return str(path)


def test_tune_measures_chooses_checks_and_auto_runs_its_policy(target, tmp_path, capsys):
    args = ["tune", "--model", str(target), "--dtype", "float32", "--method", METHOD, "--batch-sizes", "1", "2"]
    args += ["--workload", short_workload(tmp_path), "--out", str(tmp_path / "mine.json")]
    assert main([*args, "--num-prompts", "3", "--max-tokens", "12", "--check-steps", "6", "--quiet"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    record = json.loads(out[-1])
    assert record["spec"] == METHOD and record["budgets"] == [0, 1, 2, 3, 4] and record["batch_sizes"] == [1, 2]
    cells = {(c["batch_size"], c["budget"]) for c in record["cost_model"]["cells"]}
    assert cells == {(b, c) for b in (1, 2) for c in range(5)}
    assert set(record["check"]) == {"1", "2"} and all(c["tok_s"] > 0 for c in record["check"].values())
    assert "vllm" in record["engines"] and "policy:" in "\n".join(out)
    policy = SpeculationPolicy.from_file(record["policy_file"])
    # the choice, less the batch sizes the check measured below plain decoding (sent to plain decoding)
    kept = {b: 0 if int(b) in record["corrected"] else k for b, k in record["chosen"].items()}
    assert {b: policy.draft_budget(Load(int(b))) for b in record["chosen"]} == kept
    assert SpeculationPolicy.from_file(tmp_path / "mine.json") == policy
    loaded = load(str(target), "float32")
    assert SpeculationPolicy.from_file(tuned_paths(loaded, METHOD)[0]) == policy
    assert proposer_options(parse_method(f"{METHOD},policy=auto"), loaded)[POLICY] == policy
    generate = ["generate", "--model", str(target), "--prompt", "w5 w9 w5 w9", "--max-tokens", "6", "--dtype", "float32"]
    assert main([*generate, "--method", METHOD, "--policy", "auto", "--json", "--compare-baseline", "--ignore-eos"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["identical"] is True and "policy=auto" in result["label"]


def test_tune_refuses_what_it_cannot_tune(target, capsys):
    assert main(["tune", "--model", str(target), "--method", "baseline", "--quiet"]) == 2
    assert "nothing to tune" in capsys.readouterr().err
    assert main(["tune", "--model", str(target), "--method", "ngram:policy=off", "--batch-sizes", "0"]) == 2
    assert "--batch-sizes" in capsys.readouterr().err


def test_a_long_method_names_a_short_file():
    stem = file_stem("draft:draft=/" + "very/long/" * 20 + "folder")
    assert len(stem) <= 80 and "/" not in stem and stem != file_stem("draft:draft=/other")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--draft", "/heads/e"], "--draft applies to --engine vllm"),
        (["--resume"], "--resume applies to --engine vllm"),
        (["--engine", "vllm", "--resume"], "--resume needs --out"),
        (["--engine", "vllm", "--method", "baseline"], "nothing to tune"),
        (["--engine", "vllm", "--method", "ngram:policy=auto"], "name the method without one"),
        (["--engine", "vllm", "--repeats", "0"], "--repeats must be >= 1"),
    ],
)
def test_flags_that_do_not_apply_are_refused_before_anything_runs(flags, message, capsys):
    assert main(["tune", *flags]) == 2
    assert message in capsys.readouterr().err


def test_vllm_out_must_be_a_folder(tmp_path, capsys):
    policy = tmp_path / "policy.json"
    policy.write_text("{}")
    assert main(["tune", "--engine", "vllm", "--method", "ngram", "--out", str(policy)]) == 2
    assert "is a run folder" in capsys.readouterr().err


def test_a_batch_size_memory_cannot_hold_is_not_measured_and_says_why(target, tmp_path, capsys, monkeypatch):
    from speculab import free_memory
    from speculab.engine import engine_bytes

    model = load(str(target), "float32").model
    # room for an engine of 90 positions: batch 1's (about 27: the prompt, 12 tokens, the draft) and the warm-up's
    # (about 86), not batch 4's (4 x 27)
    room = int(engine_bytes(model, 1, 90) / 0.9) + 1
    monkeypatch.setattr(free_memory, "available_bytes", lambda device="cpu": room)
    args = ["tune", "--model", str(target), "--dtype", "float32", "--method", METHOD, "--batch-sizes", "1", "4"]
    args += ["--workload", short_workload(tmp_path), "--num-prompts", "3", "--max-tokens", "12", "--check-steps", "4", "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    record = json.loads(out.strip().splitlines()[-1])
    assert list(record["chosen"]) == ["1"] and "batch 4 needs" in record["skipped_batch_sizes"]["4"]
    assert "batch 4 not measured: batch 4 needs" in out
