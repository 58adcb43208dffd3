"""``speculab tune`` end to end on a tiny checkpoint, and ``--policy auto`` reading what it wrote."""

import json
from pathlib import Path

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
    # without --contexts: the workload's own, the record and the policy file as before a tune took contexts
    assert "contexts" not in record and not policy.tuned_contexts
    before = SpeculationPolicy.by_batch_size({int(b): k for b, k in kept.items()})
    assert Path(record["policy_file"]).read_text() == json.dumps(before.to_dict(), indent=1) + "\n"
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
        (["--contexts", "4kk"], "--contexts '4kk': give workload, max or a number of tokens"),
        (["--contexts", "4k@0"], "--contexts '4k@0': after @ give batch sizes"),
        (["--engine", "vllm", "--contexts", "4k"], "--contexts applies to --engine speculab"),
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


def test_a_tune_at_two_contexts_writes_one_policy_keyed_on_both(target, tmp_path, capsys):
    """The workload's own at batch 1 and 2, and 300 tokens at batch 2 alone (its own batch sizes, one request a language):
    a record part and a table per context, and one policy whose 300-token budgets hold from the midpoint of the two
    contexts' median prompt lengths."""
    args = ["tune", "--model", str(target), "--dtype", "float32", "--method", METHOD, "--batch-sizes", "1", "2"]
    args += ["--workload", short_workload(tmp_path), "--num-prompts", "3", "--max-tokens", "12", "--check-steps", "6", "--quiet"]
    assert main([*args, "--contexts", "workload", "300@2"]) == 0
    out = capsys.readouterr().out
    record = json.loads(out.strip().splitlines()[-1])
    parts = record["contexts"]
    assert list(parts) == ["workload", "300"] and "cost_model" not in record
    assert parts["workload"]["batch_sizes"] == [1, 2] and parts["300"]["batch_sizes"] == [2]
    assert parts["workload"]["num_prompts"] == 3 and parts["300"]["num_prompts"] == 2  # one request a language at 300
    assert {c["batch_size"] for c in parts["300"]["cost_model"]["cells"]} == {2} and set(parts["300"]["check"]) == {"2"}
    short, long = parts["workload"]["context_tokens"], parts["300"]["context_tokens"]
    assert short < 100 and 300 - 40 <= long <= 300 and parts["300"]["context_len"] == 300
    start = parts["300"]["from_context_len"]
    assert parts["workload"]["from_context_len"] == 0 and start == (short + long) // 2
    policy = SpeculationPolicy.from_file(record["policy_file"])
    assert policy.tuned_contexts == ("workload", "300") and record["policy"] == policy.to_dict()
    kept = {key: {int(b): 0 if int(b) in p["corrected"] else k for b, k in p["chosen"].items()} for key, p in parts.items()}
    for b in (1, 2, 4):
        assert policy.draft_budget(Load(b, short)) == policy.draft_budget(Load(b, start - 1)) == kept["workload"][min(b, 2)]
        # batch 1 was not measured at 300 tokens: the workload's budget holds there
        assert (
            policy.draft_budget(Load(b, start)) == policy.draft_budget(Load(b, 5000)) == (kept["300"][2] if b >= 2 else kept["workload"][1])
        )
    assert "context workload: prompts of" in out and "context 300: prompts of" in out
    assert set(json.loads(Path(record["costs_file"]).read_text())["contexts"]) == {"workload", "300"}


def test_a_tune_run_for_a_bench_leaves_each_contexts_prompt_cache_for_it(target, tmp_path):
    """``caches``: what a bench run hands down; each context's prompt cache is left there, filled with its prompts'
    prefill, so the run's own prefill of the same prompts is a hit."""
    from speculab.prompt_cache import PromptCache
    from speculab.tune.run import tune_with_defaults

    caches = {}
    target_args = dict(model=str(target), dtype="float32", device="cpu", kv_dtype=None, workload=short_workload(tmp_path))
    tune_with_defaults(METHOD, **target_args, quiet=True, contexts=((None, (1,)), (300, (2,))), caches=caches)
    assert set(caches) == {"workload", "300"} and all(isinstance(c, PromptCache) for c in caches.values())
    lengths = {key: sorted(len(ids) for ids, _ in c.entries) for key, c in caches.items()}
    assert len(lengths["workload"]) == 3 and max(lengths["workload"]) < 100  # the three short prompts
    assert lengths["300"] and min(lengths["300"]) > 200  # one request a language, after its files
