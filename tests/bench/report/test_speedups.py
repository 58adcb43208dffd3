"""Speedups: paired by round where the cells were timed in rounds, else a ratio of medians; one function for all."""

import pytest

from speculab.bench.report import build_report, summary
from speculab.bench.report.plots import speedup_figure
from speculab.bench.report.results import load_results
from speculab.bench.report.speedups import Speedup, speedup, timing
from tests.bench.report.synthetic import (
    BASE,
    BATCHES,
    DRAFT,
    EAGLE,
    TOK_S,
    cell,
    paragraphs,
    report_blocks,
    rows,
    run_record,
    section,
    tables,
    write_results,
)


def test_paired_rounds_give_the_median_ratio_and_its_range():
    base = {"tok_s": 10.0, "tok_s_by_round": [10.0, 20.0, 10.0]}
    mine = {"tok_s": 15.0, "tok_s_by_round": [15.0, 20.0, 30.0]}  # ratios 1.5, 1.0, 3.0
    assert speedup(mine, base) == Speedup(1.5, 1.0, 3.0, 3)
    assert speedup({"tok_s_by_round": [12.0]}, {"tok_s_by_round": [10.0]}) == Speedup(pytest.approx(1.2), None, None, 1)


def test_without_equal_rounds_the_ratio_of_medians_from_separate_cells():
    base = {"tok_s": 10.0, "tok_s_by_round": [10.0, 20.0]}
    mine = {"tok_s": 15.0, "tok_s_by_round": [15.0, 20.0, 30.0], "tok_s_repeats": [12.0, 15.0, 16.0]}
    assert speedup(mine, base) == Speedup(1.5, 1.2, 1.6, 0)
    assert speedup({"tok_s": 15.0}, {"tok_s": 10.0}) == Speedup(1.5, None, None, 0)
    assert speedup({"tok_s": 15.0}, {"tok_s": 0.0}) is None
    assert speedup({"tok_s": 15.0}, None) is None


def test_timing_counts_paired_and_separate_speedups():
    paired = [Speedup(1.0, None, None, 3), Speedup(1.0, None, None, 5)]
    assert timing(paired) == timing(paired[::-1])
    assert (timing(paired).rounds, timing(paired).paired, timing(paired).separate) == ((3, 5), 2, 0)
    mixed = timing([*paired, Speedup(1.0, None, None, 0)])
    assert (mixed.paired, mixed.separate) == (2, 1)
    assert len({timing(paired).text, mixed.text, timing([Speedup(1.0, None, None, 0)]).text, timing([]).text}) == 4


def rounds_records():
    """Cells timed in rounds whose per-round ratios' median differs from the ratio of the cells' medians."""
    base_rounds = [10.0, 40.0, 12.0]
    eagle_rounds = [8.0, 60.0, 30.0]  # ratios 0.8, 1.5, 2.5: median 1.5; tok_s 30 / 12 = 2.5
    records = [run_record(timing="rounds")]
    for b in BATCHES:
        records.append(cell(BASE, b, 12.0, tok_s_by_round=base_rounds))
        records.append(cell(EAGLE, b, 30.0, tok_s_by_round=eagle_rounds))
        records.append(cell(DRAFT, b, 24.0, tok_s_by_round=[12.0, 24.0]))  # not the baseline's rounds: 24 / 12
    return records


def test_tables_plots_and_findings_use_the_one_speedup(tmp_path):
    path = write_results(tmp_path / "results.jsonl", rounds_records())
    results = load_results(path)
    assert results.measured_speedup(EAGLE, 4) == Speedup(1.5, 0.8, 2.5, 3)
    assert results.measured_speedup(DRAFT, 4) == Speedup(2.0, None, None, 0)
    blocks = report_blocks(path)
    speed = rows(tables(section(blocks, "Speed vs concurrency"))[0])
    assert speed["4"]["eagle"] == "30.0 (1.50× [0.80–2.50])" and speed["4"]["draft"] == "24.0 (2.00×)"
    matrix = rows(tables(section(blocks, "Executive decision matrix"))[0])
    assert matrix["eagle"]["tok/s at batch 1 (speedup)"] == "30.0 (1.50× [0.80–2.50])"
    assert summary(path)["cells"][EAGLE]["4"]["speedup"] == 1.5
    lines = {bars.get_label(): list(bars.lines[0].get_ydata()) for bars in speedup_figure(results).axes[0].containers}
    assert lines["eagle"] == [1.5] * len(BATCHES) and lines["draft"] == [2.0] * len(BATCHES)
    findings = paragraphs(section(blocks, "Findings"))
    assert any("1.50× baseline" in p for p in findings)  # the recommendation quotes the paired speedup


def test_the_report_says_how_speedups_were_measured(tmp_path):
    mixed = report_blocks(write_results(tmp_path / "mixed.jsonl", rounds_records()))
    old = report_blocks(write_results(tmp_path / "old.jsonl", [run_record()] + [cell(lab, 1, t[0]) for lab, t in TOK_S.items()]))
    results = load_results(tmp_path / "mixed.jsonl")
    expected = timing([results.measured_speedup(lab, b) for lab in (DRAFT, EAGLE) for b in BATCHES])
    assert (expected.paired, expected.separate, expected.rounds) == (len(BATCHES), len(BATCHES), (3,))
    for blocks, how in ((mixed, expected), (old, timing([Speedup(1.0, None, None, 0)]))):
        assert how.text in paragraphs(section(blocks, "Executive decision matrix"))
        assert how.text in paragraphs(section(blocks, "Speed vs concurrency"))


def test_the_speedup_plot_subtitle_follows_the_timing(tmp_path):
    rounds = [run_record(timing="rounds")] + [
        cell(lab, b, 10.0, tok_s_by_round=[10.0, 11.0, 12.0]) for lab in (BASE, EAGLE) for b in BATCHES
    ]
    paired = speedup_figure(load_results(write_results(tmp_path / "r.jsonl", rounds))).axes[0].get_title()
    once = [run_record(), cell(BASE, 1, 10.0), cell(EAGLE, 1, 12.0)]
    separate = speedup_figure(load_results(write_results(tmp_path / "s.jsonl", once))).axes[0].get_title()
    assert "round" in paired and "separate cells" in separate and "round" not in separate
    assert set(build_report(tmp_path / "r.jsonl", tmp_path / "out")) >= {"plot_speedup"}


def test_a_cell_run_in_groups_pairs_its_rounds_with_its_own_groups_baseline():
    base = {"tok_s": 10.0, "tok_s_by_round": [10.0, 20.0, 10.0]}
    grouped = {"tok_s": 15.0, "tok_s_by_round": [15.0, 20.0, 30.0], "turn_s": 0.25, "baseline_tok_s_by_round": [30.0, 40.0, 10.0]}
    assert speedup(grouped, base) == Speedup(0.5, 0.5, 3.0, 3, 0.25, True)  # ratios 0.5, 0.5, 3.0
    old = {k: v for k, v in grouped.items() if k != "baseline_tok_s_by_round"}  # a record written before groups
    assert speedup(old, base) == Speedup(1.5, 1.0, 3.0, 3, 0.25, False)  # ratios 1.5, 1.0, 3.0, as ever
    short = grouped | {"baseline_tok_s_by_round": [30.0, 40.0]}  # rounds that do not pair: the ratio of medians
    assert speedup(short, base) == Speedup(1.5, None, None, 0)
    assert speedup(grouped, None) is None
    said = timing([speedup(grouped, base), speedup(old, base)])
    assert said.in_groups == 1 and "for 1 of them" in said.text and "`cell.baseline_tok_s_by_round`" in said.text
    assert "baseline_tok_s_by_round" not in timing([speedup(old, base)]).text


def test_the_report_of_rounds_in_groups_pairs_each_method_with_its_groups_baseline(tmp_path):
    groups = [[BASE, EAGLE], [BASE, DRAFT]]
    text = f"in groups with the baseline (memory): {BASE}+{EAGLE}, {BASE}+{DRAFT}"
    memory = {"engine_bytes": 2**30, "available_bytes": 2**31, "rounds": text, "groups": groups}
    records = [run_record(timing="rounds")]
    for b in BATCHES:
        records.append(cell(BASE, b, 12.0, tok_s_by_round=[10.0, 40.0, 12.0], memory=memory, turn_s=0.25))
        # the first group's baseline runs are the baseline cell's own: 0.8, 1.5, 2.5
        records.append(cell(EAGLE, b, 30.0, tok_s_by_round=[8.0, 60.0, 30.0], baseline_tok_s_by_round=[10.0, 40.0, 12.0], memory=memory))
        # the second group's: 2.0, 1.5, 1.0 (over the baseline cell's rounds it would be 2.0, 0.75, 3.33: median 2.0)
        records.append(cell(DRAFT, b, 30.0, tok_s_by_round=[20.0, 30.0, 40.0], baseline_tok_s_by_round=[10.0, 20.0, 40.0], memory=memory))
    path = write_results(tmp_path / "results.jsonl", records)
    results = load_results(path)
    assert results.measured_speedup(EAGLE, 4) == Speedup(1.5, 0.8, 2.5, 3, None, True)
    assert results.measured_speedup(DRAFT, 4) == Speedup(1.5, 1.0, 2.0, 3, None, True)
    blocks = report_blocks(path)
    speed = rows(tables(section(blocks, "Speed vs concurrency"))[0])
    assert speed["4"]["eagle"] == "30.0 (1.50× [0.80–2.50])" and speed["4"]["draft"] == "30.0 (1.50× [1.00–2.00])"
    (said,) = paragraphs(section(blocks, "Memory: cells not run, rounds run alone or in groups"))  # one grouping, every batch
    assert said.startswith("At batch 1, 2, 4, 8, 16 the methods' engines did not fit in memory together but each fit beside")
    assert ": baseline+eagle, baseline+draft (`cell.memory.rounds`)" in said and "`cell.baseline_tok_s_by_round`" in said
