"""BENCHMARKS.md's generated block against the raw results, and the generator (benchmarks/reference.py) on synthetic
results.jsonl files in a temporary tree laid out like the repository. No model, no timing: a few seconds."""

import hashlib
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

from speculab.bench.report.numbers import speedup_text
from speculab.bench.report.results import load_results

ROOT = Path(__file__).resolve().parents[2]


def _load_reference():
    spec = importlib.util.spec_from_file_location("benchmarks_reference", ROOT / "benchmarks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


reference = _load_reference()

BASE = "baseline"
DRAFT = "draft(num_speculative_tokens=3,draft_vocab=auto)"
EAGLE = "eagle(num_steps=3,topk=2,num_draft_tokens=4,batch_budget=4,draft_vocab=auto)"  # the default, as older runs spell it
EAGLE_AUTO = EAGLE[:-1] + ",policy=auto)"
EAGLE_SHARED = "eagle(num_steps=3,topk=2,num_draft_tokens=4,policy=shared:4,draft_vocab=auto)"  # the same default, renamed
EAGLE_SHARED_AUTO = "eagle(num_steps=3,topk=2,num_draft_tokens=4,draft_vocab=auto,policy=auto)"
EAGLE3 = "eagle3(num_steps=3,topk=2,num_draft_tokens=4,policy=shared:4,draft_vocab=auto)"
BASELINE_ROUNDS = {1: [100.0, 110.0, 90.0], 4: [200.0, 220.0, 180.0]}
FACTORS = {DRAFT: [1.5, 1.1, 1.3], EAGLE: [1.2, 1.2, 1.2], EAGLE_AUTO: [1.25, 1.2, 1.3]}  # per round, at every batch size
WEIGHTS = b"the shipped draft model"
MARKED = "# Benchmarks\n\nIntro.\n\n<!-- reference:begin -->\nold\n<!-- reference:end -->\n\n## Kept\n\nHand-written.\n"


def _params(label: str) -> dict:
    name, _, rest = label.partition("(")
    settings = dict(part.split("=", 1) for part in rest.rstrip(")").split(",") if "=" in part)
    return {"name": name, "policy": settings.get("policy")}


def run_record(labels, run_id="r1", started="2026-01-02T00:00:00+00:00", draft_sha=None):
    sha = {"model.safetensors": draft_sha or hashlib.sha256(WEIGHTS).hexdigest()}
    return {
        "kind": "run",
        "run_id": run_id,
        "started": started,
        "config": {
            "methods": labels,
            "method_params": {label: _params(label) for label in labels},
            "max_tokens": 64,
            "repeats": 3,
            "timing": "rounds",
            "dtype": "float32",
            "kv_dtype": "float32",
            "linear_kernels": "native-test",
        },
        "testbed": {
            "cpu": "Test CPU",
            "cpu_flags": ["avx2", "fma"],
            "cpu_count": 2,
            "ram_bytes": 2**34,
            "python": "3.11.7",
            "torch": "2.13.0+cpu",
        },
        "models": {"drafters": {DRAFT: {"id": "test-draft", "path": "/somewhere/test-draft", "sha256": sha}}} if DRAFT in labels else {},
    }


def cell(label, batch, rounds, run_id="r1"):
    return {
        "kind": "cell",
        "run_id": run_id,
        "method": _params(label)["name"],
        "label": label,
        "batch_size": batch,
        "num_prompts": 4 * batch,
        "tok_s": statistics.median(rounds),
        "tok_s_by_round": rounds,
        "turn_s": 0.25,
        "greedy_identical": True,
        "peak_rss_bytes": 2**30 * batch,
    }


def write_run(root, folder, factors=None, run_id="r1", started="2026-01-02T00:00:00+00:00", scale=1.0, draft_sha=None):
    """A make-bench-like results.jsonl under bench-matrix/``folder``: the baseline and ``factors`` (label -> per-round ratios)."""
    factors = FACTORS if factors is None else factors
    records = [run_record([BASE, *factors], run_id, started, draft_sha)]
    for batch, base in BASELINE_ROUNDS.items():
        records.append(cell(BASE, batch, base, run_id))
        records += [cell(lab, batch, [b * f * scale for b, f in zip(base, fs)], run_id) for lab, fs in factors.items()]
    all_prompts = {"prompts": 48, "acceptance_rate": 0.305, "tau": 1.9}
    records.append({"kind": "acceptance", "run_id": run_id, "method": "draft", "label": DRAFT, "all": all_prompts})
    path = root / "benchmarks" / "results" / "bench-matrix" / folder / "results.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def root(tmp_path):
    """A tree with the shipped draft model and a BENCHMARKS.md with the markers."""
    assets = tmp_path / "speculab" / "assets" / "test-draft"
    assets.mkdir(parents=True)
    (assets / "model.safetensors").write_bytes(WEIGHTS)
    (tmp_path / "BENCHMARKS.md").write_text(MARKED)
    return tmp_path


# ---------------------------------------------------------------- the real BENCHMARKS.md


def test_benchmarks_md_matches_the_raw_results():
    diff = reference.check(ROOT)
    assert diff == "", "BENCHMARKS.md's generated block differs from benchmarks/results/: run `python benchmarks/reference.py`\n" + diff


# ---------------------------------------------------------------- the generator


def test_columns_are_method_names_and_speedups_are_the_reports(root):
    path = write_run(root, "testcpu-2026-01-02")
    block = reference.render(root)
    header = next(line for line in block.splitlines() if line.startswith("| batch |"))
    assert header == "| batch | baseline tok/s | draft | eagle | eagle-auto |"
    results = load_results(path)
    row = next(line for line in block.splitlines() if line.startswith("| 1 |"))
    for label in (DRAFT, EAGLE, EAGLE_AUTO):
        assert speedup_text(results, label, 1).split(" ")[1] in row  # the report's [lowest–highest], verbatim
    assert row == "| 1 | 100.0 | **1.30×** [1.10–1.50] | 1.20× [1.20–1.20] | 1.25× [1.20–1.30] |"
    assert "### testcpu (`make bench`, 2026-01-02)" in block
    assert "`benchmarks/results/bench-matrix/testcpu-2026-01-02/`" in block
    assert "every cell's output identical to the baseline's (6 of 6)" in block
    assert "draft 30.5% (τ 1.90)" in block
    assert "linear kernels `native-test`" in block


@pytest.mark.parametrize(
    "labels, columns",
    [
        ([EAGLE, EAGLE_AUTO], ["eagle", "eagle-auto"]),
        ([EAGLE_SHARED, EAGLE_SHARED_AUTO, EAGLE3], ["eagle", "eagle-auto", "eagle3"]),
        ([EAGLE, EAGLE[:-1] + ",policy=benchmarks/policies/floor.json)"], ["eagle", "eagle-floor"]),
    ],
)
def test_label_spellings_name_the_same_columns(root, labels, columns):
    path = write_run(root, "testcpu-2026-01-02", {label: [1.1, 1.2, 1.3] for label in labels})
    assert list(reference.column_names(load_results(path)).values()) == columns


def test_two_labels_of_one_name_keep_the_reports_short_labels(root):
    wide = "eagle(num_steps=3,topk=4,num_draft_tokens=4,batch_budget=4,draft_vocab=auto)"
    path = write_run(root, "testcpu-2026-01-02", {EAGLE: [1.1, 1.2, 1.3], wide: [1.0, 1.0, 1.0]})
    results = load_results(path)
    assert reference.column_names(results) == {EAGLE: results.short(EAGLE), wide: results.short(wide)}
    assert results.short(EAGLE) != results.short(wide)


def test_each_kind_takes_its_latest_folder_and_suffixed_folders_are_not_tabled(root):
    write_run(root, "testcpu-2026-01-01", scale=0.5)
    write_run(root, "testcpu-2026-01-02")
    write_run(root, "testcpu-2026-01-03-superseded", scale=2.0)
    write_run(root, "othercpu-2025-12-31")
    block = reference.render(root)
    assert [r.folder.name for r in reference.latest_runs(root)] == ["testcpu-2026-01-02", "othercpu-2025-12-31"]
    assert block.index("### testcpu") < block.index("### othercpu")
    assert "testcpu-2026-01-01" not in block and "superseded" not in block
    assert "| 1 | 100.0 | **1.30×** [1.10–1.50]" in block


def test_the_spread_comes_from_the_latest_rerun_pair(root):
    write_run(root, "testcpu-2026-01-02")
    pair = "testcpu-2026-01-01-rerun-pair"
    write_run(root, f"{pair}/first", started="2026-01-01T00:00:00+00:00")
    write_run(root, f"{pair}/second", {**FACTORS, EAGLE: [1.26, 1.26, 1.26]}, started="2026-01-01T01:00:00+00:00")
    block = reference.render(root)
    assert "parted by at most 5.0% at batch 1, 5.0% at batch 4" in block
    assert f"`benchmarks/results/bench-matrix/{pair}/`" in block


def test_the_spread_of_three_reruns_is_the_widest_between_any_two(root):
    write_run(root, "testcpu-2026-01-02")
    reruns = "testcpu-2026-01-02-reruns"
    write_run(root, f"{reruns}/a", started="2026-01-02T00:00:00+00:00")
    write_run(root, f"{reruns}/b", {**FACTORS, EAGLE: [1.26, 1.26, 1.26]}, started="2026-01-02T01:00:00+00:00")
    write_run(root, f"{reruns}/c", {**FACTORS, EAGLE: [1.14, 1.14, 1.14]}, started="2026-01-02T02:00:00+00:00")
    block = reference.render(root)
    assert "3 `make bench` runs of one commit" in block and f"{1.26 / 1.14 - 1:.1%} at batch 1" in block


def test_of_two_rerun_sets_of_one_day_the_one_that_ran_last_gives_the_spread(root):
    write_run(root, "testcpu-2026-01-02")
    write_run(root, "testcpu-2026-01-02-reruns/a", started="2026-01-02T00:00:00+00:00")
    write_run(root, "testcpu-2026-01-02-reruns/b", {**FACTORS, EAGLE: [1.26, 1.26, 1.26]}, started="2026-01-02T01:00:00+00:00")
    write_run(root, "testcpu-2026-01-02-rerun-pair/a", started="2026-01-02T05:00:00+00:00")
    write_run(root, "testcpu-2026-01-02-rerun-pair/b", {**FACTORS, EAGLE: [1.14, 1.14, 1.14]}, started="2026-01-02T06:00:00+00:00")
    block = reference.render(root)
    assert "`benchmarks/results/bench-matrix/testcpu-2026-01-02-rerun-pair/`" in block
    assert f"{1.2 / 1.14 - 1:.1%} at batch 1" in block


def test_without_a_rerun_pair_the_documented_spread_is_stated(root):
    write_run(root, "testcpu-2026-01-02")
    assert reference.DOCUMENTED_SPREAD in reference.render(root)


def test_drafters_retrained_since_the_run_are_flagged(root):
    write_run(root, "testcpu-2026-01-02")
    assert "**Drafters:** the ones shipped now" in reference.render(root)
    (root / "speculab" / "assets" / "test-draft" / "model.safetensors").write_bytes(b"retrained")
    assert "**Drafters since retrained: rerun `make bench`.** `test-draft`" in reference.render(root)


def test_a_manifest_stands_for_absent_weights(root):
    write_run(root, "testcpu-2026-01-02")
    folder = root / "speculab" / "assets" / "test-draft"
    (folder / "model.safetensors").unlink()
    manifest = {"files": {"config.json": "00" * 32, "model.safetensors": hashlib.sha256(WEIGHTS).hexdigest()}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert "**Drafters:** the ones shipped now" in reference.render(root)


def test_check_catches_a_changed_figure(root, capsys):
    write_run(root, "testcpu-2026-01-02")
    assert reference.main(["--root", str(root)]) == 0
    written = (root / "BENCHMARKS.md").read_text()
    assert written.startswith("# Benchmarks\n\nIntro.\n\n<!-- reference:begin -->\n") and written.endswith("## Kept\n\nHand-written.\n")
    assert reference.main(["--root", str(root), "--check"]) == 0
    assert capsys.readouterr().out == ""
    (root / "BENCHMARKS.md").write_text(written.replace("| 1.20× [1.20–1.20] |", "| 1.21× [1.20–1.20] |", 1))
    assert reference.main(["--root", str(root), "--check"]) == 1
    diff = capsys.readouterr().out
    assert "\n-| 1 | 100.0 | **1.30×** [1.10–1.50] | 1.21× [1.20–1.20]" in diff
    assert "\n+| 1 | 100.0 | **1.30×** [1.10–1.50] | 1.20× [1.20–1.20]" in diff


def test_check_catches_new_results(root):
    write_run(root, "testcpu-2026-01-02")
    reference.main(["--root", str(root)])
    write_run(root, "testcpu-2026-01-05", scale=1.1)
    assert "testcpu-2026-01-05" in reference.check(root)


def test_the_block_is_deterministic_and_names_no_path_of_this_machine(root):
    write_run(root, "testcpu-2026-01-02")
    block = reference.render(root)
    assert block == reference.render(root)
    assert str(root) not in block and "/somewhere" not in block


def test_a_document_without_the_markers_is_refused(root):
    (root / "BENCHMARKS.md").write_text("# Benchmarks\n")
    with pytest.raises(ValueError, match="markers"):
        reference.check(root)


# ---------------------------------------------------------------- a run of two context lengths

LONG = 4096
LONG_BASELINE_ROUNDS = {1: [50.0, 55.0, 45.0], 4: [80.0, 88.0, 72.0]}  # the baseline at LONG: slower than at the short context
LONG_FACTORS = {DRAFT: [0.9, 0.8, 1.0], EAGLE: [1.4, 1.5, 1.3]}
PROMPT_TOKENS = {None: 1234, LONG: 4102}  # cell.context_tokens


def write_context_run(root, folder, started="2026-01-02T00:00:00+00:00"):
    """A make-bench-like run of the workload's prompts as they are and at ``LONG`` tokens of context: at the short one
    ``FACTORS``' DRAFT and EAGLE over ``BASELINE_ROUNDS``, at ``LONG`` ``LONG_FACTORS`` over ``LONG_BASELINE_ROUNDS``."""
    record = run_record([BASE, DRAFT, EAGLE], started=started)
    record["config"]["contexts"] = [None, LONG]
    records = [record]
    for context, baseline, factors in (
        (None, BASELINE_ROUNDS, {DRAFT: FACTORS[DRAFT], EAGLE: FACTORS[EAGLE]}),
        (LONG, LONG_BASELINE_ROUNDS, LONG_FACTORS),
    ):
        for batch, base in baseline.items():
            found = [cell(BASE, batch, base)] + [cell(lab, batch, [b * f for b, f in zip(base, fs)]) for lab, fs in factors.items()]
            records += [{**c, "context": context, "context_tokens": PROMPT_TOKENS[context]} for c in found]
    path = root / "benchmarks" / "results" / "bench-matrix" / folder / "results.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_run_of_two_contexts_tables_each_against_its_own_baseline(root):
    path = write_context_run(root, "testcpu-2026-01-02")
    lines = reference.render(root).splitlines()
    table = lines[lines.index("| context | batch | baseline tok/s | draft | eagle |") :]
    assert table[1:6] == [
        "|---|---|---|---|---|",
        "| 1.2k | 1 | 100.0 | **1.30×** [1.10–1.50] | 1.20× [1.20–1.20] |",
        "| 1.2k | 4 | 200.0 | **1.30×** [1.10–1.50] | 1.20× [1.20–1.20] |",
        "| 4.1k | 1 | 50.0 | 0.90× [0.80–1.00] | **1.40×** [1.30–1.50] |",  # over the 4.1k baseline, not the 1.2k one's 100.0
        "| 4.1k | 4 | 80.0 | 0.90× [0.80–1.00] | **1.40×** [1.30–1.50] |",
    ]
    long = load_results(path).at_context(LONG)
    assert speedup_text(long, EAGLE, 1) == "1.40× [1.30–1.50]"
    contexts = next(line for line in lines if line.startswith("- **Contexts**"))
    assert "1.2k: the workload's prompts as they are, median prompt 1,234 tokens" in contexts
    assert "4.1k: whole repository files before each request, up to 4,096 tokens, median prompt 4,102 tokens" in contexts
    assert "every cell's output identical to the baseline's (8 of 8)" in reference.render(root)
    assert "Bold: the fastest method at that batch size and context where it beats plain decoding." in reference.render(root)


def test_the_spread_of_two_context_runs_compares_each_context_with_itself(root):
    write_context_run(root, "testcpu-2026-01-02")
    pair = "testcpu-2026-01-02-rerun-pair"
    write_context_run(root, f"{pair}/first")
    write_context_run(root, f"{pair}/second", started="2026-01-02T01:00:00+00:00")
    assert "parted by at most 0.0% at batch 1, 0.0% at batch 4" in reference.render(root)  # across contexts: 50% and more
