"""``speculab bench`` end to end on tiny checkpoints: cells, identity, report, resume, errors."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from speculab.bench import in_process, settings
from speculab.cli import main
from speculab.engine import Engine
from speculab.prompt_cache import PromptCache
from speculab.sampling import SamplingParams
from tests.helpers import save_tiny_checkpoint, tiny_model

DOMAINS = ("python", "typescript", "sql")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return tiny_bench_files(tmp_path_factory.mktemp("bench"))


def tiny_bench_files(root):
    """A tiny target, a tiny draft model and a six-prompt workload in ``root``."""
    target = save_tiny_checkpoint(root / "target", seed=1)
    draft = save_tiny_checkpoint(root / "draft", seed=1, num_hidden_layers=1)
    workload = root / "workload.jsonl"
    lines = []
    for i in range(6):
        words = " ".join(f"w{3 + (i * 7 + j * 3) % 200}" for j in range(12 + i))
        lines.append(
            json.dumps({"id": f"p{i}", "domain": DOMAINS[i % 3], "task": "refactor", "messages": [{"role": "user", "content": words}]})
        )
    workload.write_text("\n".join(lines) + "\n")
    return root, target, draft, workload


def bench_args(setup, out, *extra):
    root, target, draft, workload = setup
    return [
        "bench",
        "--model",
        str(target),
        "--dtype",
        "float32",
        "--workload",
        str(workload),
        "--methods",
        "baseline",
        "ngram:num_speculative_tokens=3,prompt_lookup_min=1,prompt_lookup_max=3",
        f"draft:draft={draft}",
        "--batch-sizes",
        "1",
        "2",
        "--num-prompts",
        "6",
        "--max-tokens",
        "8",
        "--out",
        str(out),
        "--no-progress",
        "--acceptance-pass",
        *extra,
    ]


LABELS = (
    "baseline",
    "ngram(num_speculative_tokens=3,prompt_lookup_min=1,prompt_lookup_max=3)",
    "draft(num_speculative_tokens=3,draft_vocab=auto)@draft",
)


def records(out, kind):
    return [r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if r.get("kind") == kind]


def cells(out):
    return records(out, "cell")


def test_bench_writes_cells_report_and_summary(setup, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(bench_args(setup, out)) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = cells(out)
    assert {(c["label"], c["batch_size"]) for c in rows} == {
        (m, b)
        for m in (
            "baseline",
            "ngram(num_speculative_tokens=3,prompt_lookup_min=1,prompt_lookup_max=3)",
            "draft(num_speculative_tokens=3,draft_vocab=auto)@draft",
        )
        for b in (1, 2)
    }
    for c in rows:
        assert c["greedy_identical"] is True and c["agreement"] == 1.0  # lossless, fp32
        assert c["ttft_p50_s"] <= c["wall_s"]  # the first token comes inside the cell's time
        assert set(c["acceptance_by_domain"]) == set(DOMAINS)
        if c["method"] == "baseline":
            assert c["tau"] == 1.0 and c["acceptance_rate"] is None
    draft = next(c for c in rows if c["method"] == "draft")
    # the figures agree with each other: τ counts the bonus token, per-depth counts add up to the accepted ones
    assert draft["tau"] == pytest.approx((draft["accepted_tokens"] + draft["steps"]) / draft["steps"])
    assert sum(draft["accepted_per_position"]) == draft["accepted_tokens"]
    reached = draft["reached_per_position"]
    accepted = draft["accepted_per_position"] + [0] * (len(reached) - len(draft["accepted_per_position"]))
    assert draft["conditional_acceptance"] == pytest.approx([a / r for a, r in zip(accepted, reached)])
    assert (out / "report.md").exists() and (out / "report.html").exists()
    passes = {r["label"]: r for r in records(out, "acceptance")}
    assert set(passes) == {c["label"] for c in rows if c["method"] != "baseline"}
    for label, r in passes.items():
        assert {d: f["prompts"] for d, f in r["by_domain"].items()} == {d: 2 for d in DOMAINS}
        # fp32: a request's drafts do not depend on its batch, so the untimed pass (16 at a time) counts batch 1's
        at_one = next(c for c in rows if c["label"] == label and c["batch_size"] == 1)
        assert (r["all"]["accepted_tokens"], r["all"]["drafted_depth"]) == (at_one["accepted_tokens"], sum(at_one["drafted_per_position"]))
    report = (out / "report.md").read_text()
    assert "## Acceptance by language" in report and "(2)" in report
    assert summary["results"] == str(out / "results.jsonl")
    base = {c["batch_size"]: c["tok_s_by_round"] for c in rows if c["method"] == "baseline"}
    for c in rows:
        # the repeats took turns in rounds: a speedup is the median of the per-round ratios to the baseline
        assert len(c["tok_s_by_round"]) == c["repeats"] == 3 and sorted(c["tok_s_by_round"]) == c["tok_s_repeats"]
        got = summary["cells"][c["label"]][str(c["batch_size"])]
        ratios = sorted(m / b for m, b in zip(c["tok_s_by_round"], base[c["batch_size"]]))
        assert got["speedup"] == pytest.approx(ratios[1])


def test_killed_run_resumes_and_loses_only_the_cells_in_flight(setup, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real = in_process.finished_repeat
    calls = {"n": 0}

    def dies_in_the_second_batch_size(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 11:  # 3 methods x 3 rounds at batch 1, then the second method's first round at batch 2
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(in_process, "finished_repeat", dies_in_the_second_batch_size)
    with pytest.raises(KeyboardInterrupt):
        main(bench_args(setup, out))
    assert {(c["label"], c["batch_size"]) for c in cells(out)} == {(label, 1) for label in LABELS}
    with open(out / "results.jsonl", "a") as f:
        f.write('{"kind": "cell", "run_id": "cut mid-wri')  # a kill in the middle of a write
    monkeypatch.setattr(in_process, "finished_repeat", real)
    assert main(bench_args(setup, out)) == 2  # without --resume an existing run is never overwritten
    assert main(["bench", "--resume", "--out", str(out), "--no-progress"]) == 0  # README's command: the run's own settings
    rows = cells(out)
    keys = [(c["label"], c["batch_size"]) for c in rows]
    assert sorted(keys) == sorted((label, b) for label in LABELS for b in (1, 2))
    assert len({c["run_id"] for c in rows}) == 1
    assert all(c["greedy_identical"] for c in rows)  # the baseline's outputs were recovered from the file
    runs = records(out, "run")
    assert len(runs) == 2 and runs[0]["config"] == runs[1]["config"]  # one configuration per run_id


def test_resume_refuses_a_flag_that_contradicts_the_run_and_a_second_writer(setup, tmp_path, capsys):
    from speculab.bench.results_store import ResultsFile

    out = tmp_path / "run"
    assert main(bench_args(setup, out, "--batch-sizes", "1")) == 0
    capsys.readouterr()
    assert main(["bench", "--resume", "--out", str(out), "--max-tokens", "16"]) == 2
    err = capsys.readouterr().err
    assert "--max-tokens" in err and "max_tokens=16" in err and "8" in err
    assert main(["bench", "--resume", "--out", str(out), "--methods", "baseline"]) == 2
    assert "--methods" in capsys.readouterr().err
    assert main(["bench", "--resume", "--out", str(tmp_path / "empty")]) == 2
    assert "no run to resume" in capsys.readouterr().err
    with ResultsFile(out / "results.jsonl").hold():  # another process's run holds the folder
        assert main(bench_args(setup, out, "--batch-sizes", "1", "--resume")) == 2
    assert f"pid {os.getpid()}" in capsys.readouterr().err
    before = (out / "results.jsonl").read_text()
    assert main(bench_args(setup, out, "--batch-sizes", "1", "--resume")) == 0  # the same flags agree: nothing left to run
    assert [r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if r["kind"] == "cell"] == [
        r for r in map(json.loads, before.splitlines()) if r["kind"] == "cell"
    ]


def line_count(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def kill_after_progress(proc: subprocess.Popen, results, rng: random.Random, timeout: float = 240) -> bool:
    """SIGKILL ``proc`` a seeded random moment (0-0.5 s) after ``results`` gains a line, so the kill falls inside
    the run on a machine of any speed; False when the process ended first."""
    before, deadline = line_count(results), time.monotonic() + timeout
    while proc.poll() is None and line_count(results) <= before and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 0.5))
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


@pytest.mark.long
def test_a_run_killed_at_random_points_resumes_to_one_complete_run(setup, tmp_path):
    """A real ``speculab bench`` process killed (SIGKILL) at seeded random moments, then resumed until it ends."""
    out = tmp_path / "run"
    argv = [sys.executable, "-c", "import sys; from speculab.cli import main; sys.exit(main(sys.argv[1:]))"]
    rng = random.Random(7)
    kills = 0
    for attempt in range(8):
        started = bool(records(out, "run")) if (out / "results.jsonl").exists() else False
        args = bench_args(setup, out, "--resume") if started else bench_args(setup, out)
        proc = subprocess.Popen(argv + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if attempt < 4 and kill_after_progress(proc, out / "results.jsonl", rng):
            kills += 1
            continue
        proc.wait(timeout=240)
        assert proc.returncode == 0, proc.stderr.read()
        break
    assert kills >= 1  # the seeded kill times fall inside the run: the test exercised a resume
    rows = cells(out)
    keys = [(c["label"], c["batch_size"]) for c in rows]
    assert sorted(keys) == sorted((label, b) for label in LABELS for b in (1, 2))  # none lost, none twice
    assert len({c["run_id"] for c in rows}) == 1
    runs = records(out, "run")
    assert all(r["config"] == runs[0]["config"] for r in runs)  # one configuration per run_id
    passes = [r["label"] for r in records(out, "acceptance")]
    assert sorted(passes) == sorted(set(passes))


def test_unknown_method_and_bad_workload_are_clear_errors(setup, tmp_path, capsys):
    root, target, draft, workload = setup
    assert main(["bench", "--methods", "medusa", "--out", str(tmp_path / "a")]) == 2
    assert "unknown method 'medusa'" in capsys.readouterr().err
    assert main(["bench", "--methods", "eagle:topk=x", "--out", str(tmp_path / "a")]) == 2
    assert "topk must be a int" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "w5 w6"}\n{"id": "b", "messages": "not a list"}\n')
    assert main(["bench", "--workload", str(bad), "--out", str(tmp_path / "b")]) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2


def test_prompt_cache_reproduces_a_fresh_prefill():
    model = tiny_model(seed=2)
    prompts = [list(range(5, 40)), list(range(50, 61)), list(range(5, 40))]
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    fresh = Engine(model, 2, 128).generate(prompts, params)
    cache = PromptCache()
    first = Engine(model, 2, 128, prompt_cache=cache).generate(prompts, params)
    second = Engine(model, 3, 128, prompt_cache=cache).generate(prompts, params)
    assert [r.output_ids for r in first] == [r.output_ids for r in second] == [r.output_ids for r in fresh]
    assert cache.misses == 2 and cache.hits == 1 + 3


def test_method_specs_parse_with_defaults_and_labels():
    from speculab.methods import parse_method

    assert parse_method("eagle").label == "eagle(num_steps=3,topk=2,num_draft_tokens=4,draft_vocab=auto,policy=shared:4)"
    assert parse_method("eagle:draft_vocab=none").label == "eagle(num_steps=3,topk=2,num_draft_tokens=4,policy=shared:4)"
    assert parse_method("eagle:eagle=/x/my-head").label.endswith("policy=shared:4)@my-head")
    # two settings that differ in one switched-off parameter never share a label
    assert parse_method("eagle:draft_vocab=none").label != parse_method("eagle:policy=off").label
    assert parse_method("eagle:draft_vocab=2048").params["draft_vocab"] == 2048
    with pytest.raises(ValueError, match="int, auto or none"):
        parse_method("eagle:draft_vocab=many")
    spec = parse_method("eagle:num_steps=5,topk=8,num_draft_tokens=32,policy=off")
    assert spec.params["policy"] is None and spec.label == "eagle(num_steps=5,topk=8,num_draft_tokens=32,draft_vocab=auto)"
    assert parse_method("ngram:num_speculative_tokens=3").params == {
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 5,
        "policy": None,
    }
    with pytest.raises(ValueError, match="takes"):
        parse_method("baseline:k=1")


def test_the_run_records_its_sizing_and_each_cell_runs_that_many_prompts(setup, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(settings.PROFILES, "quick", {**settings.PROFILES["quick"], "time_limit_s": 1e-3})
    args = [a for a in bench_args(setup, tmp_path / "run") if a not in ("--num-prompts", "6")]
    assert main(args) == 0
    run = next(json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines() if '"run"' in line)
    # a tiny budget: at least a prompt of each of the workload's 3 languages, in whole batches
    assert run["prompts_per_cell"] == {"workload": {"1": 3, "2": 4}}
    assert set(run["calibration_tok_s"]) == {"1", "2"}
    for c in cells(tmp_path / "run"):
        assert c["num_prompts"] == {1: 3, 2: 4}[c["batch_size"]]
        assert c["greedy_identical"] is True


def test_a_bf16_kv_cache_is_recorded_and_stays_lossless(setup, tmp_path):
    """--kv-dtype bfloat16: the run says so, the memory estimate counts 2 bytes a cached value, and every method
    still gives the baseline's greedy tokens (the draft model's cache is bf16 too)."""
    out = tmp_path / "run"
    args = bench_args(setup, out, "--kv-dtype", "bfloat16")
    args[args.index("--batch-sizes") + 1 : args.index("--batch-sizes") + 3] = ["2"]
    assert main(args) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    run = next(r for r in records if r["kind"] == "run")
    assert run["config"]["kv_dtype"] == "bfloat16" and run["config"]["dtype"] == "float32"
    assert {m["kv_dtype_bytes"] for m in run["memory"].values()} == {2}
    assert all(c["greedy_identical"] for c in cells(out))


def test_policy_auto_runs_what_tune_chose_and_the_cells_record_it(setup, tmp_path, monkeypatch):
    """`speculab tune` on the target, then `bench` with policy=auto: the ngram cells carry the tuned table and stay
    greedy-identical to the baseline."""
    monkeypatch.setattr("speculab.policy.store.cache_dir", lambda: tmp_path / "cache")  # not SPECULAB_CACHE: the native build lives there
    root, target, draft, workload = setup
    ngram = "ngram:num_speculative_tokens=3,prompt_lookup_min=1,prompt_lookup_max=3"
    tune = ["tune", "--model", str(target), "--dtype", "float32", "--workload", str(workload), "--method", ngram]
    assert main([*tune, "--batch-sizes", "1", "2", "--num-prompts", "6", "--max-tokens", "12", "--check-steps", "0", "--quiet"]) == 0
    out = tmp_path / "run"
    args = bench_args(setup, out)
    args[args.index("--methods") + 1 : args.index("--batch-sizes")] = ["baseline", f"{ngram},policy=auto"]
    assert main(args) == 0
    tuned = json.loads(next((tmp_path / "cache" / "tune").rglob("*.policy.json")).read_text())
    spec_cells = [c for c in cells(out) if c["method"] == "ngram"]
    assert len(spec_cells) == 2 and all(c["policy"] == tuned and "policy=auto" in c["label"] for c in spec_cells)
    assert all(c["greedy_identical"] for c in spec_cells)


def test_without_the_acceptance_pass_the_report_takes_acceptance_from_the_cells(setup, tmp_path):
    """--quick's default: no pass; the report's acceptance by language is the timed cells' (it says so)."""
    out = tmp_path / "run"
    assert main(bench_args(setup, out, "--no-acceptance-pass", "--batch-sizes", "1")) == 0
    assert records(out, "acceptance") == [] and records(out, "run")[0]["config"]["acceptance_pass"] is False
    report = (out / "report.md").read_text()
    assert "## Acceptance in the timed cells" in report and "no acceptance pass in this run" in report
