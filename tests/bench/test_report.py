"""The benchmark report, built from a synthetic results.jsonl."""

import json
import math
from pathlib import Path

import pytest

from speculab.bench.report import break_even, build_report, load_results, summary
from speculab.models.config import CONFIGS
from speculab.models.memory import estimate

BATCHES = [1, 2, 4, 8, 16]
TOK_S = {  # label -> tok/s per batch size (the study's table, as test data)
    "baseline": [18.2, 34.6, 62.4, 98.4, 154.2],
    "draft(4)": [32.8, 58.2, 89.1, 114.2, 148.6],
    "eagle(5,8,32)": [44.6, 78.4, 121.8, 158.6, 172.4],
}
METHOD = {"baseline": "baseline", "draft(4)": "draft", "eagle(5,8,32)": "eagle"}
ACCEPT = {
    "draft(4)": (0.584, {"python": 0.612, "typescript": 0.567, "sql": 0.581}, 2.71),
    "eagle(5,8,32)": (0.812, {"python": 0.834, "typescript": 0.798, "sql": 0.825}, 3.93),
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_record(run_id="r1", cpu="Test CPU"):
    target, drafter = CONFIGS["llama-3.3-70b"], CONFIGS["llama-3.2-1b"]
    common = {
        "dtype_bytes": 2,
        "budget_bytes": 24_564 * 2**20,
        "tensor_parallel": 4,
        "target_weight_format": "awq",
        "memory_utilization": 0.9,
        "overhead_bytes": 2 * 2**30,
    }
    return {
        "kind": "run",
        "run_id": run_id,
        "started": "2026-01-01T00:00:00Z",
        "config": {
            "methods": ["baseline", "draft", "eagle"],
            "batch_sizes": BATCHES,
            "num_prompts": 8,
            "max_tokens": 64,
            "temperature": 0.0,
            "profile": "quick",
            "workload": "code-v1",
            "dtype": "bfloat16",
        },
        "testbed": {
            "os": "Linux",
            "kernel": "6.8.0",
            "cpu": cpu,
            "ram_bytes": 8 * 2**30,
            "gpu": None,
            "python": "3.11.9",
            "torch": "2.13.0",
            "speculab": "0.1.0",
        },
        "models": {
            "target": {"id": "tgt-model", "path": "/m/t", "sha256": "ab" * 32},
            "drafters": {"draft": {"id": "small-model", "path": "/m/d", "sha256": "cd" * 32}},
        },
        "memory": {
            "baseline": estimate(target, None, None, **common),
            "draft": estimate(target, "draft", drafter, **common),
            "eagle": estimate(target, "eagle", None, **common),
        },
    }


def cell(label, batch, tok_s, run_id="r1", **extra):
    acc, by_domain, tau = ACCEPT.get(label, (None, {}, 1.0))
    record = {
        "kind": "cell",
        "run_id": run_id,
        "method": METHOD[label],
        "label": label,
        "params": {},
        "batch_size": batch,
        "num_prompts": 8,
        "repeats": 3,
        "output_tokens": 512,
        "wall_s": 512 / tok_s,
        "tok_s": tok_s,
        "tok_s_per_request": tok_s / batch,
        "ttft_p50_s": 0.1,
        "ttft_p99_s": 0.2,
        "tpot_p50_s": 0.05,
        "tpot_p99_s": 0.08,
        "itl_p50_s": 0.04,
        "itl_p99_s": 0.09,
        "tau": tau,
        "acceptance_rate": acc,
        "acceptance_by_domain": by_domain,
        "tau_by_domain": {d: tau for d in by_domain},
        "accepted_per_position": [5, 3, 1],
        "reached_per_position": [8, 5, 3],
        "steps": 100,
        "peak_rss_bytes": 2**30,
        "greedy_identical": None if label == "baseline" else True,
        "agreement": None,
        "some_future_field": 1,
    }
    record.update(extra)
    return record


def write_results(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def standard_records():
    records = [run_record(cpu="stale CPU"), {"kind": "progress", "note": "unknown kinds are ignored"}]
    records.append(cell("eagle(5,8,32)", 1, 1.0))  # superseded by the later record for the same (label, batch)
    records.append(cell("eagle(5,8,32)", 1, 999.0, run_id="older-run"))  # another run's cell: ignored
    for label, values in TOK_S.items():
        records += [cell(label, b, t) for b, t in zip(BATCHES, values)]
    records.append(run_record(cpu="Resumed CPU"))  # a resumed run: the last run record counts
    return records


@pytest.fixture
def results_path(tmp_path):
    truncated = '{"kind": "cell", "run_id": "r1", "label": "eagle(5,8,32)", "batch_'  # crash mid-write
    return write_results(tmp_path / "results.jsonl", standard_records(), tail=truncated)


def test_report_files_and_pngs(results_path, tmp_path):
    paths = build_report(results_path, tmp_path / "report")
    assert set(paths) == {"report_md", "report_html", "plot_tok_s", "plot_speedup", "plot_acceptance"}
    for key in ("plot_tok_s", "plot_speedup", "plot_acceptance"):
        data = Path(paths[key]).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    page = Path(paths["report_html"]).read_text()
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    for name in ("tok_s_vs_batch.png", "speedup_vs_batch.png", "acceptance_by_domain.png"):
        assert f'<img src="{name}"' in page
    assert "<table>" in page and "44.6 (2.45×)" in page


def test_markdown_numbers_come_from_the_results(results_path, tmp_path):
    md = Path(build_report(results_path, tmp_path / "r")["report_md"]).read_text()
    for label, values in TOK_S.items():
        for b, t in zip(BATCHES, values):
            base = TOK_S["baseline"][BATCHES.index(b)]
            expected = f"{t:.1f}" if label == "baseline" else f"{t:.1f} ({t / base:.2f}×)"
            assert expected in md, expected
    assert "| 1 | 18.2 | 32.8 (1.80×) | 44.6 (2.45×) |" in md  # speed vs concurrency row for batch 1
    assert "server setting" not in md  # EAGLE wins at every batch size: nothing to switch off
    assert "81.2%" in md and "83.4%" in md and "56.7%" in md and "3.93" in md  # acceptance and tau
    assert "Resumed CPU" in md and "stale CPU" not in md  # last run record wins
    assert "ab" * 32 in md and "small-model" in md  # model ids with sha256
    assert "999.0" not in md  # the other run's cell
    assert "| eagle(5,8,32) | 1 | 8 | 3 | 512 |" in md  # last record for (eagle, 1) wins over tok_s 1.0
    assert "Skipped unreadable results.jsonl lines" in md
    assert "batch ≤ 8" in md  # draft: faster than baseline up to batch 8, slower at 16
    assert "all measured batch sizes (1–16); fastest at batch 1–16" in md  # eagle
    assert "135,377" in md  # baseline KV capacity tokens from run.memory (the docs/memory.md example)
    assert "+36% over draft(4)" in md  # recommendation: 44.6 / 32.8 at batch 1
    assert "Source:" in md


def test_acceptance_by_depth_is_conditional_on_the_depth_before(results_path, tmp_path):
    md = Path(build_report(results_path, tmp_path / "r")["report_md"]).read_text()
    assert "Acceptance by depth, given the depth before was accepted" in md
    assert "| eagle(5,8,32) | 1 | 0.62 (5/8) | 0.60 (3/5) | 0.33 (1/3) |" in md


def test_break_even_in_report(results_path, tmp_path):
    md = Path(build_report(results_path, tmp_path / "r")["report_md"]).read_text()
    s0, s1 = 114.2 / 98.4, 148.6 / 154.2
    crossing = 2 ** (3 + (1 - s0) / (s1 - s0))
    assert 8 < crossing < 16
    assert f"break-even ≈ batch {crossing:.1f} (interpolated linearly in log2(batch))" in md
    assert "| draft(4) | 8 | 16 |" in md
    assert "| eagle(5,8,32) | 16 | — | — |" in md


def test_break_even_crafted():
    be = break_even([(8, 0.8), (1, 2.0), (2, 1.5), (4, 1.2), (16, 0.5)])
    assert (be.last_faster, be.first_slower, be.recovers) == (4, 8, False)
    assert be.crossing == pytest.approx(2**2.5)  # 1.2 -> 0.8 over log2 4..8: halfway
    be = break_even([(1, 1.0), (2, 0.5)])
    assert (be.last_faster, be.first_slower, be.crossing) == (1, 2, 1.0)
    never = break_even([(1, 0.9), (2, 1.1), (4, 0.7)])
    assert (never.first_slower, never.crossing, never.last_faster, never.recovers) == (1, None, 2, True)
    always = break_even([(1, 3.0), (16, 1.01), (4, None)])
    assert (always.last_faster, always.first_slower, always.crossing) == (16, None, None)


def test_baseline_wins_at_high_batch(tmp_path):
    values = {"baseline": [10.0, 19.0, 36.0, 60.0, 100.0], "eagle(5,8,32)": [20.0, 30.0, 40.0, 50.0, 55.0]}
    records = [run_record()] + [cell(lab, b, t) for lab, v in values.items() for b, t in zip(BATCHES, v)]
    md = Path(build_report(write_results(tmp_path / "res.jsonl", records), tmp_path / "r")["report_md"]).read_text()
    assert "At batch 1–4, eagle(5,8,32) is fastest" in md
    assert "At batch 8–16, plain decoding (baseline) is fastest" in md
    assert "eagle(5,8,32) at batch 1–4; no speculation at batch 8–16" in md
    assert "As one server setting: eagle(5,8,32) with `disable_by_batch_size=4`" in md
    assert "batch ≤ 4; fastest at batch 1–4" in md
    # crossing between batch 4 (40/36) and 8 (50/60)
    s0, s1 = 40 / 36, 50 / 60
    assert f"≈ batch {2 ** (2 + (1 - s0) / (s1 - s0)):.1f}" in md
    assert "acceptance_by_domain.png" in md


def test_correctness_warning_and_no_baseline(tmp_path):
    records = [run_record(), cell("baseline", 1, 10.0), cell("eagle(5,8,32)", 1, 20.0, greedy_identical=False)]
    md = Path(build_report(write_results(tmp_path / "a.jsonl", records), tmp_path / "a")["report_md"]).read_text()
    assert "Correctness warning" in md and "eagle(5,8,32) at batch 1" in md
    records = [cell("draft(4)", 1, 20.0), cell("draft(4)", 2, 30.0)]  # no run record, no baseline
    out = build_report(write_results(tmp_path / "b.jsonl", records), tmp_path / "b")
    assert "no baseline" in Path(out["report_md"]).read_text().lower()
    assert summary(tmp_path / "b.jsonl")["cells"]["draft(4)"]["2"]["speedup"] is None


def test_summary(results_path):
    s = summary(results_path)
    json.dumps(s)
    assert s["run_id"] == "r1" and s["baseline"] == "baseline"
    assert list(s["cells"]) == ["baseline", "draft(4)", "eagle(5,8,32)"]
    eagle1 = s["cells"]["eagle(5,8,32)"]["1"]
    assert eagle1["tok_s"] == 44.6 and eagle1["speedup"] == pytest.approx(44.6 / 18.2)
    assert eagle1["tau"] == 3.93 and eagle1["acceptance_rate"] == 0.812
    assert s["cells"]["baseline"]["16"]["speedup"] == 1.0
    assert s["break_even"]["draft(4)"]["first_slower"] == 16
    assert math.isclose(s["break_even"]["draft(4)"]["crossing"], 2 ** (3 + (1 - 114.2 / 98.4) / (148.6 / 154.2 - 114.2 / 98.4)))


def test_load_results_tolerates_truncation_only_as_skipped(results_path):
    results = load_results(results_path)
    assert results.skipped_lines == [len(standard_records()) + 1]
    assert len(results.cells) == 15 and results.run["testbed"]["cpu"] == "Resumed CPU"


def test_divergences_show_both_runs_margins_against_the_bound(tmp_path):
    """bf16 outputs that part at near-ties are shown as rounding; one that parts where the target was decided warns."""

    def parted(gaps, near, key="chosen_gaps"):  # records older than the chosen-token gaps kept "margins"
        return {"prompt": 0, "token_index": 7, "tokens": [5, 9], "logprob_gap": 0.01, "near_tie": near, "bound": 1.875, key: gaps}

    records = [run_record()] + [cell(label, b, t) for label, values in TOK_S.items() for b, t in zip(BATCHES, values)]
    records.append(
        cell("draft(4)", 1, 32.8, greedy_identical=False, agreement=0.9, divergences=[parted([0.125, 0.0], True)], all_near_ties=True)
    )
    records.append(
        cell(
            "draft(4)",
            2,
            58.2,
            greedy_identical=False,
            agreement=0.5,
            divergences=[parted([3.5, 0.25], False, key="margins")],
            all_near_ties=False,
        )
    )
    md = Path(build_report(write_results(tmp_path / "results.jsonl", records), tmp_path / "report")["report_md"]).read_text()
    assert "| draft(4) | 1 | no | 90.0% | — | — | 1 | 0.0100 | 0.125 | 1.875 | yes |" in md
    assert "| draft(4) | 2 | no | 50.0% | — | — | 1 | 0.0100 | 3.500 | 1.875 | NO |" in md
    warning = next(line for line in md.splitlines() if line.startswith("**Correctness warning:**"))
    assert "draft(4) at batch 2" in warning and "batch 1" not in warning
    assert "`--dtype float32`" in md


def test_a_policy_capped_method_shows_its_cap_and_speedup_at_each_batch_size(tmp_path, monkeypatch):
    """A method run under a policy (a file's or auto's) gets a row: its cap per batch size, plain where 0."""
    records = [run_record()] + [cell(label, b, t) for label, values in TOK_S.items() for b, t in zip(BATCHES, values)]
    policy = {"by_batch_size": {"1": 3, str(BATCHES[-1]): 0}, "min_acceptance": 0.0, "window": 8, "probe_nodes": 1}
    monkeypatch.setitem(METHOD, "draft(policy=auto)", "draft")
    records += [cell("draft(policy=auto)", b, t, policy=policy) for b, t in zip(BATCHES, TOK_S["draft(4)"])]
    md = Path(build_report(write_results(tmp_path / "results.jsonl", records), tmp_path / "r")["report_md"]).read_text()
    section = md.split("## Speculation policies")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| draft(policy=auto)"))
    assert row.count("| 3 (") == len(BATCHES) - 1 and f"plain ({148.6 / 154.2:.2f}x)" in row
    assert (
        "## Speculation policies"
        not in Path(
            build_report(write_results(tmp_path / "plain.jsonl", records[: -len(BATCHES)]), tmp_path / "p")["report_md"]
        ).read_text()
    )
