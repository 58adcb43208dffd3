"""A run of two context lengths, read as the report's typed blocks and plots: a speed table per context, each speedup
over the baseline of the same batch size and context, the crossover table, the heatmap, the best use and the
recommendation at each context, skipped cells with their context; a run of one context as before."""

from pathlib import Path

import pytest

from speculab.bench.report import build_report, summary
from speculab.bench.report.blocks import Image, to_markdown
from speculab.bench.report.heatmap import heatmap_figure
from speculab.bench.report.numbers import context_name
from speculab.bench.report.plots import tok_s_figure
from speculab.bench.report.results import load_results
from tests.bench.report.synthetic import (
    BASE,
    BATCHES,
    DRAFT,
    EAGLE,
    LONG,
    TOK_S,
    TOK_S_LONG,
    cell,
    context_records,
    has_section,
    matrix,
    paragraphs,
    report_blocks,
    rows,
    run_record,
    section,
    tables,
    write_results,
)

SHORT_CONTEXT = "Context 1.2k (the workload's prompts as they are, median prompt 1,234 tokens)"
LONG_CONTEXT = "Context 4.1k (whole repository files before each request, up to 4,096 tokens, median prompt 4,102 tokens)"


@pytest.fixture
def path(tmp_path):
    return write_results(tmp_path / "results.jsonl", context_records())


def test_contexts_are_read_and_named_by_their_median_prompt_tokens(path):
    results = load_results(path)
    assert results.contexts == [None, LONG] and results.several_contexts
    assert results.context is None and results.context_tokens(LONG) == 4102
    assert [context_name(results, c) for c in results.contexts] == ["1.2k", "4.1k"]
    assert len(results.all_cells) == 29 and len(results.cells) == 15  # the first context's, keyed (label, batch)
    assert results.at_context(LONG).cells[(EAGLE, 8)]["tok_s"] == 40.0 and (EAGLE, 16) not in results.at_context(LONG).cells


def test_a_speed_table_per_context(path):
    speed = section(report_blocks(path), "Speed vs concurrency")
    for title, values in ((SHORT_CONTEXT, TOK_S), (LONG_CONTEXT, TOK_S_LONG)):
        table = rows(tables(section(speed, title))[0])
        assert list(table) == [str(b) for b in BATCHES if values[BASE][BATCHES.index(b)] is not None]
        for b, base, tok in zip(BATCHES, values[BASE], values[EAGLE]):
            assert table[str(b)]["eagle"] == ("—" if tok is None else f"{tok:.1f} ({tok / base:.2f}×)")
    detail = tables(section(speed, "Every cell"))[0]
    assert detail.headers[:3] == ["label", "context", "batch"] and len(detail.rows) == 29


def test_a_speedup_is_never_paired_across_contexts(tmp_path):
    records = [r for r in context_records() if not (r.get("label") == BASE and r.get("context") == LONG and r.get("batch_size") == 16)]
    results = load_results(write_results(tmp_path / "r.jsonl", records))
    long = results.at_context(LONG)
    assert long.speedup(DRAFT, 1) == pytest.approx(8.0 / 9.0)  # not over the short context's 18.2
    assert results.speedup(DRAFT, 1) == pytest.approx(32.8 / 18.2)
    assert long.speedup(DRAFT, 16) is None  # no baseline at 4.1k: the short context's is not taken
    assert rows(tables(section(report_blocks(tmp_path / "r.jsonl"), LONG_CONTEXT))[0])["16"]["draft"] == "70.0"


def test_the_crossover_table_gives_where_each_method_stops_paying_at_each_context(path):
    blocks = section(report_blocks(path), "Speedup by context length")
    crossover = rows(tables(section(blocks, "Where speculation stops paying"))[0])
    assert crossover["draft"] == {
        "Method": "draft",
        "stops paying at batch, context 1.2k": f"16 ({148.6 / 154.2:.2f}×)",
        "stops paying at batch, context 4.1k": "never pays (1–16)",
    }
    assert crossover["eagle"] == {
        "Method": "eagle",
        "stops paying at batch, context 1.2k": "pays at every batch measured (up to 16)",
        "stops paying at batch, context 4.1k": "4 (0.90×)",
    }
    assert [b.path for b in blocks if isinstance(b, Image)] == ["speedup_heatmap.png"]


def test_the_heatmap_is_drawn_annotated_and_marks_the_skipped_cell(path, tmp_path):
    paths = build_report(path, tmp_path / "report")
    heatmap = Path(paths["plot_heatmap"])
    assert heatmap.name == "speedup_heatmap.png" and heatmap.read_bytes()[:4] == b"\x89PNG"
    assert "![Speedup over plain decoding by batch size and context length](speedup_heatmap.png)" in Path(paths["report_md"]).read_text()
    fig = heatmap_figure(load_results(path))
    draft, eagle = fig.axes[:2]
    assert (draft.get_title(), eagle.get_title()) == ("draft", "eagle")
    assert [t.get_text() for t in eagle.get_yticklabels()] == ["1.2k", "4.1k"]
    assert [t.get_text() for t in eagle.get_xticklabels()] == [str(b) for b in BATCHES]
    written = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in eagle.texts}
    assert written[(0, 0)] == f"{44.6 / 18.2:.2f}" and written[(2, 1)] == "0.90" and written[(4, 1)] == "skipped"


def test_best_use_and_the_recommendation_name_each_context(path):
    blocks = report_blocks(path)
    decision = rows(tables(section(blocks, "Executive decision matrix"))[0])
    assert decision["draft"]["Best use (from the numbers)"] == "batch ≤ 8 at 1.2k; never faster at 4.1k"
    assert decision["eagle"]["Best use (from the numbers)"] == (
        "all measured batch sizes (1–16) at 1.2k (fastest at batch 1–16); batch ≤ 2 at 4.1k (fastest at batch 1–2)"
    )
    assert decision["eagle"]["tok/s at batch 1, 4.1k (speedup)"] == "18.0 (2.00×)"
    verdict = [p for p in paragraphs(section(blocks, "Findings")) if p.startswith("**Recommendation")]
    assert verdict == [
        "**Recommendation from these measurements:** at 1.2k: eagle at batch 1–16; at 4.1k: eagle at batch 1–2, no speculation at batch 4–16."
    ]
    findings = tables(section(blocks, "Findings"))[0]
    assert [row[:4] for row in findings.rows if row[0] == "eagle"] == [["eagle", "1.2k", "16", "—"], ["eagle", "4.1k", "2", "4"]]


def test_a_threshold_that_moves_with_the_context_is_said(tmp_path):
    short = {BASE: [10.0, 20.0, 40.0, 80.0, 160.0], EAGLE: [20.0, 30.0, 50.0, 60.0, 100.0]}  # eagle wins up to 4
    long = {BASE: [5.0, 10.0, 20.0, 40.0, 80.0], EAGLE: [12.0, 20.0, 30.0, 50.0, 60.0]}  # eagle wins up to 8
    records = [run_record(contexts=[None, LONG]), *matrix(short, context_tokens=1234), *matrix(long, context=LONG, context_tokens=4102)]
    found = paragraphs(section(report_blocks(write_results(tmp_path / "r.jsonl", records)), "Findings"))
    (setting,) = [p for p in found if "server setting" in p]
    assert "eagle with plain decoding above 4 running requests at 1.2k and 8 at 4.1k" in setting


def test_a_skipped_cell_is_listed_with_its_context(path):
    table = tables(section(report_blocks(path), "Memory: cells not run, rounds run alone"))[0]
    assert table.headers[:3] == ["Method", "Context", "Batch"]
    assert table.rows == [["eagle", "4.1k", "16", "9.00 GiB", "6.00 GiB", "its engine alone needs more than is free"]]


def test_the_plots_name_each_contexts_line_style(path):
    fig = tok_s_figure(load_results(path))
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["baseline", "draft", "eagle", "context 1.2k", "context 4.1k"]


def test_the_summary_has_each_context(path):
    s = summary(path)
    assert s["contexts"] == [None, LONG]
    long = s["by_context"][1]
    assert (long["context"], long["name"], long["context_tokens"]) == (LONG, "4.1k", 4102)
    assert long["cells"][DRAFT]["1"]["speedup"] == pytest.approx(8.0 / 9.0) and long["break_even"][EAGLE]["first_slower"] == 4
    assert s["cells"][DRAFT]["1"]["speedup"] == pytest.approx(32.8 / 18.2)  # the top level: the first context


def test_a_run_of_one_context_renders_as_before(tmp_path):
    old = write_results(tmp_path / "old.jsonl", [run_record(), *matrix()])
    new = write_results(tmp_path / "new.jsonl", [run_record(contexts=[None]), *matrix(context=None, context_tokens=1234)])
    old_md = to_markdown(report_blocks(old))
    assert to_markdown(report_blocks(new)) == old_md.replace("| dtype | bfloat16 |", "| dtype | bfloat16 |\n| contexts | [null] |")
    results = load_results(old)
    assert results.contexts == [None] and not results.several_contexts and heatmap_figure(results) is None
    assert not has_section(report_blocks(old), "Speedup by context length")
    assert tables(section(report_blocks(old), "Every cell"))[0].headers[:2] == ["label", "batch"]
    assert set(build_report(old, tmp_path / "report")) == {"report_md", "report_html", "plot_tok_s", "plot_speedup", "plot_acceptance"}


def test_a_context_without_measured_tokens_is_named_by_the_length_asked(tmp_path):
    records = [run_record(contexts=[None, LONG]), cell(BASE, 1, 10.0), cell(BASE, 1, 5.0, context=LONG)]
    results = load_results(write_results(tmp_path / "r.jsonl", records))
    assert [context_name(results, c) for c in results.contexts] == ["as written", "4.1k"]
    records += [cell(BASE, 1, 4.0, context=4000)]  # 4,000 asked reads 4.0k: apart from 4,096's 4.1k
    results = load_results(write_results(tmp_path / "r.jsonl", records))
    assert [context_name(results, c) for c in results.contexts] == ["as written", "4.0k", "4.1k"]
    records += [cell(BASE, 1, 4.0, context=4090)]
    results = load_results(write_results(tmp_path / "r.jsonl", records))
    assert context_name(results, 4090) == "4.1k (4,090)" and context_name(results, LONG) == "4.1k (4,096)"


def test_a_context_asked_for_but_never_recorded_is_said(tmp_path):
    records = [r for r in context_records() if r.get("context") != LONG or r.get("kind") != "cell" or r.get("label") != BASE]
    records[0] = run_record(contexts=[None, LONG, 16384, "max"])
    blocks = section(report_blocks(write_results(tmp_path / "r.jsonl", records)), "Speedup by context length")
    assert paragraphs(blocks)[0].endswith("Asked for, with no cell recorded: 16,384.")
    crossover = rows(tables(blocks)[0])
    assert crossover["eagle"]["stops paying at batch, context 4.1k"] == "—"  # no baseline at 4.1k: no speedup


def test_acceptance_by_context_gives_each_drafters_tau_at_each_context_and_their_ratio(tmp_path):
    records = context_records()
    for r in records:  # the draft model drafts worse after the long prompts; EAGLE as well as before
        if r.get("kind") == "cell" and r["label"] == DRAFT and r.get("context") == LONG:
            r.update(tau=1.9, acceptance_rate=0.29)
    blocks = section(report_blocks(write_results(tmp_path / "r.jsonl", records)), "Acceptance by context length")
    table = rows(tables(blocks)[0])
    assert table["draft"] == {
        "Method": "draft",
        "batch": "1",
        "τ (acceptance rate), context 1.2k": "2.71 (58.4%)",
        "τ (acceptance rate), context 4.1k": "1.90 (29.0%)",
        "τ 4.1k / τ 1.2k": f"{1.9 / 2.71:.2f}",
    }
    assert table["eagle"]["τ 4.1k / τ 1.2k"] == "1.00" and "baseline" not in table
    assert not has_section(report_blocks(write_results(tmp_path / "one.jsonl", matrix())), "Acceptance by context length")
