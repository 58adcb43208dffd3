"""An auto row (``policy=auto``) in ``speculab bench``: tuned before the cells when this machine has no policy,
and one acceptance pass with its fixed method."""

import json

import pytest

from speculab.cli import main
from speculab.policy.store import tuned_paths
from speculab.policy.table import SpeculationPolicy
from speculab.prompt_cache import PromptCache
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


# -- a run with contexts: the tune it triggers measures them ------------------------------------------------------------
def test_the_tuner_is_handed_the_runs_contexts_with_its_batch_sizes_at_the_long_ones():
    from speculab.bench.auto_policy import RunTuner
    from speculab.bench.settings import BenchConfig

    calls = []
    tune = lambda spec, **kw: calls.append((spec, kw)) or {}  # noqa: E731
    assert RunTuner.for_run(None, BenchConfig(methods=())) is None
    quick = RunTuner.for_run(tune, BenchConfig(methods=(), batch_sizes=(1, 16), contexts=(None, 4096)))
    quick("eagle", model="m", quiet=True)
    # the workload's own at the tuner's own batch sizes (None), 4k at the run's
    assert calls[-1] == ("eagle", {"model": "m", "quiet": True, "contexts": ((None, None), (4096, (1, 16))), "caches": quick.caches})
    own = BenchConfig(methods=(), batch_sizes=(1, 16), contexts=(None, 4096, "max"), context_batch_sizes={"4096": (1, 4)})
    RunTuner.for_run(tune, own)("ngram")
    assert calls[-1][1]["contexts"] == ((None, None), (4096, (1, 4)), ("max", (1, 16)))


def test_a_stored_policy_without_a_context_the_run_asks_for_counts_as_untuned(tmp_path, monkeypatch):
    """A policy written without tuned_contexts was tuned at the workload's own alone: a run at 4k tunes again, at both
    contexts, and a later run at either or both finds it tuned."""
    from types import SimpleNamespace

    from speculab.bench import auto_policy
    from speculab.methods import parse_method

    path = tmp_path / "eagle.policy.json"
    monkeypatch.setattr(auto_policy, "tuned_paths", lambda loaded, text: (path, tmp_path / "eagle.costs.json"))
    loaded = SimpleNamespace(path=tmp_path / "target", dtype="float32", device="cpu", kv_dtype="float32")
    specs = [parse_method("eagle:policy=auto"), parse_method("eagle")]
    asked = []

    def tune(spec, *, contexts, **target):
        asked.append(contexts)
        keys = ["workload" if c is None else str(c) for c, _ in contexts]
        policy = SpeculationPolicy.by_batch_size({1: 2}, tuned_contexts=tuple(keys) if keys != ["workload"] else ())
        path.write_text(json.dumps(policy.to_dict()))
        return {}

    workload_only = auto_policy.RunTuner(tune)
    at_4k = auto_policy.RunTuner(tune, (None, 4096), {"4096": [1, 16]})
    assert [s.label for s in auto_policy.untuned(specs, loaded, at_4k.contexts)] == [specs[0].label]  # no file
    assert list(auto_policy.tune_untuned(specs, loaded, None, False, workload_only)) == [specs[0].label]
    assert asked == [((None, None),)] and "tuned_contexts" not in json.loads(path.read_text())
    assert auto_policy.tune_untuned(specs, loaded, None, False, workload_only) == {}  # kept
    assert list(auto_policy.tune_untuned(specs, loaded, None, False, at_4k)) == [specs[0].label]  # 4k lacking: again
    assert asked[-1] == ((None, None), (4096, (1, 16))) and SpeculationPolicy.from_file(path).tuned_contexts == ("workload", "4096")
    for contexts in ((None,), (4096,), (None, 4096)):
        assert auto_policy.untuned(specs, loaded, contexts) == []
    assert auto_policy.untuned(specs, loaded, (None, 8192)) == specs[:1]


def test_a_run_at_two_contexts_has_its_auto_row_tuned_at_both(target, tmp_path, monkeypatch):
    """``speculab bench --contexts workload 300@2`` hands its contexts down to the tuner (300 tokens at the run's batch
    size there) and its cells at 300 run the policy it wrote (the tuner here writes one without measuring: the tune at
    two contexts is tests/tune/test_cli.py's)."""
    handed, left = [], PromptCache()

    def tune_with_defaults(spec_text, *, contexts, caches, **target):
        handed.append(contexts)
        caches["300"] = left  # a tune's prompt cache at 300 tokens: the run's prefill there starts from it
        policy = SpeculationPolicy.by_load({(1, 0): 2, (1, 150): 1}, tuned_contexts=("workload", "300"))
        path = tuned_paths(load(target["model"], target["dtype"]), spec_text)[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(policy.to_dict()))
        return {}

    monkeypatch.setattr("speculab.tune.run.tune_with_defaults", tune_with_defaults)
    workload = tmp_path / "workload.jsonl"
    texts = ["w5 w9 w11 w5 w9 w11 w5 w9", "w7 w3 w7 w3 w7 w3", "w8 w2 w6 w8 w2 w6 w8"]
    workload.write_text("".join(json.dumps({"id": f"p{i}", "domain": "python", "prompt": t}) + "\n" for i, t in enumerate(texts)))
    args = ["bench", "--model", str(target), "--dtype", "float32", "--workload", str(workload), "--num-prompts", "3"]
    args += ["--methods", "baseline", f"{METHOD},policy=auto", "--batch-sizes", "1", "--max-tokens", "8", "--no-progress"]
    assert main([*args, "--contexts", "workload", "300@2", "--no-acceptance-pass", "--out", str(tmp_path / "run")]) == 0
    assert handed == [((None, None), (300, (2,)))]  # the workload's own at the tuner's batch sizes, 300 at the run's
    assert len(left.entries) == 3  # the run's three prompts at 300 tokens were prefilled into the cache handed down
    records = run_records(tmp_path / "run")
    tuned = SpeculationPolicy.from_file(tuned_paths(load(str(target), "float32"), METHOD)[0])
    assert len(records[0]["tuned_now_s"]) == 1 and tuned.tuned_contexts == ("workload", "300")
    auto = [r for r in records if r["kind"] == "cell" and r.get("policy")]
    assert {(r["batch_size"], r["context"]) for r in auto} == {(1, None), (2, 300)} and all(r["policy"] == tuned.to_dict() for r in auto)
