"""An auto row (``policy=auto``) in ``speculab bench``: tuned before the cells when this machine has no policy,
and one acceptance pass with its fixed method."""

import json

import pytest

from speculab.cli import main
from speculab.policy.store import tuned_paths
from speculab.policy.table import SpeculationPolicy
from speculab.runtime import load
from tests.helpers import save_tiny_checkpoint

METHOD = "ngram:prompt_lookup_min=1"


@pytest.fixture
def target(tmp_path, monkeypatch):
    monkeypatch.setattr("speculab.policy.store.cache_dir", lambda: tmp_path / "cache")
    return save_tiny_checkpoint(tmp_path / "target")


def run_records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_an_auto_row_is_tuned_once_then_runs_the_tuned_policy(target, tmp_path):
    workload = tmp_path / "workload.jsonl"
    texts = ["w5 w9 w11 w5 w9 w11 w5 w9", "w7 w3 w7 w3 w7 w3", "w8 w2 w6 w8 w2 w6 w8"]
    workload.write_text("".join(json.dumps({"id": f"p{i}", "domain": "python", "prompt": t}) + "\n" for i, t in enumerate(texts)))
    args = ["bench", "--model", str(target), "--dtype", "float32", "--workload", str(workload), "--num-prompts", "3"]
    args += [
        "--methods",
        "baseline",
        METHOD,
        f"{METHOD},policy=auto",
        "--batch-sizes",
        "1",
        "2",
        "--max-tokens",
        "8",
        "--no-progress",
        "--acceptance-pass",
    ]
    policy_file = tuned_paths(load(str(target), "float32"), METHOD)[0]
    assert not policy_file.exists()
    assert main([*args, "--out", str(tmp_path / "first")]) == 0
    first = run_records(tmp_path / "first")
    tuned = SpeculationPolicy.from_file(policy_file)
    adaptive = [r for r in first if r["kind"] == "cell" and r["method"] == "ngram" and r["policy"]]
    assert list(first[0]["tuned_now_s"]) == [adaptive[0]["label"]] and first[0]["tuned_now_s"][adaptive[0]["label"]] > 0
    assert {r["batch_size"] for r in adaptive} == {1, 2} and all(r["policy"] == tuned.to_dict() for r in adaptive)
    fixed, auto = [r for r in first if r["kind"] == "acceptance"]  # drafting as at batch 1 they are one pass
    assert auto["same_pass_as"] == fixed["label"] and auto["label"] == adaptive[0]["label"] and auto["all"] == fixed["all"]
    assert main([*args, "--out", str(tmp_path / "second")]) == 0  # the policy is kept: nothing tuned again
    assert "tuned_now_s" not in run_records(tmp_path / "second")[0]
