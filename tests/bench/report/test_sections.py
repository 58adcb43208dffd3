"""The report's sections, read as typed blocks: the tables' cells and the findings' data, not their prose."""

import pytest

from speculab.bench.report.blocks import Image, Paragraph, Table, to_markdown
from speculab.bench.report.findings import break_even, winner_runs, winners
from speculab.bench.report.results import load_results
from tests.bench.report.synthetic import (
    BASE,
    BATCHES,
    DRAFT,
    EAGLE,
    TOK_S,
    acceptance_record,
    cell,
    has_section,
    matrix,
    paragraphs,
    report_blocks,
    rows,
    run_record,
    section,
    standard_records,
    tables,
    write_results,
)

SHORT = {BASE: "baseline", DRAFT: "draft", EAGLE: "eagle"}


@pytest.fixture
def path(tmp_path):
    truncated = f'{{"kind": "cell", "run_id": "r1", "label": "{EAGLE}", "batch_'  # crash mid-write
    return write_results(tmp_path / "results.jsonl", standard_records(), tail=truncated)


def test_speed_table_cells_are_tok_s_and_speedup(path):
    speed = rows(tables(section(report_blocks(path), "Speed vs concurrency"))[0])
    assert list(speed) == [str(b) for b in BATCHES]
    for label, values in TOK_S.items():
        for b, t in zip(BATCHES, values):
            base = TOK_S[BASE][BATCHES.index(b)]
            assert speed[str(b)][SHORT[label]] == (f"{t:.1f}" if label == BASE else f"{t:.1f} ({t / base:.2f}×)")


def test_every_cell_is_the_last_record_of_the_last_run(path):
    blocks = report_blocks(path)
    detail = tables(section(blocks, "Every cell"))[0]
    cells = {(r[0], r[1]): dict(zip(detail.headers, r)) for r in detail.rows}
    assert len(cells) == len(TOK_S) * len(BATCHES)
    assert cells[("eagle", "1")]["tok/s"] == "44.6"  # not the superseded 1.0 nor the other run's 999.0
    testbed = rows(tables(section(blocks, "Testbed"))[0])
    assert testbed["CPU"]["Value"] == "Resumed CPU"  # the last run record
    models = rows(tables(section(blocks, "Testbed"))[1])
    assert models["target"]["sha256"] == f"`{'ab' * 32}`"
    assert models["drafter (draft)"]["Model id"] == "small-model" and "cd" * 32 in models["drafter (draft)"]["sha256"]
    assert paragraphs(section(blocks, "Findings"))[-1].startswith("Skipped unreadable results.jsonl lines")


def test_decision_matrix(path):
    matrix_rows = rows(tables(section(report_blocks(path), "Executive decision matrix"))[0])
    assert list(matrix_rows) == ["baseline", "draft", "eagle"]
    assert matrix_rows["eagle"]["tok/s at batch 1 (speedup)"] == f"44.6 ({44.6 / 18.2:.2f}×)"
    assert (matrix_rows["eagle"]["Acceptance rate"], matrix_rows["eagle"]["Mean τ"]) == ("81.2%", "3.93")
    assert matrix_rows["draft"]["Best use (from the numbers)"] == "batch ≤ 8"  # faster up to 8, slower at 16
    assert matrix_rows["eagle"]["Best use (from the numbers)"] == "all measured batch sizes (1–16); fastest at batch 1–16"


def test_kv_capacity_table_shows_the_run_records_estimates(path):
    stored = load_results(path).run["memory"]
    kv = rows(tables(section(report_blocks(path), "KV capacity"))[0])
    assert list(kv) == ["baseline", "draft", "eagle"]
    for label, short in SHORT.items():
        assert kv[short]["KV capacity tokens"] == f"{stored[label]['kv_capacity_tokens']:,}"
        assert kv[short]["drafter params"] == f"{stored[label]['drafter_parameters']:,}"


def test_methods_table_gives_each_full_label_once(path):
    blocks = report_blocks(path)
    methods = tables(section(blocks, "Methods"))[0]
    assert methods.rows == [[SHORT[lab], lab.split("(")[0], f"`{lab}`"] for lab in (BASE, DRAFT, EAGLE)]
    markdown = to_markdown(blocks)
    assert all(markdown.count(lab) == 1 for lab in (DRAFT, EAGLE))
    others = [b for b in blocks if b is not methods]
    texts = [c for t in tables(others) for row in [t.headers, *t.rows] for c in row] + paragraphs(others)
    assert not [t for t in texts if DRAFT in t or EAGLE in t]


def test_acceptance_timed_cells_and_by_depth(path):
    blocks = report_blocks(path)
    rate, tau = tables(section(blocks, "Acceptance in the timed cells"))[:2]
    assert rows(rate)["eagle"] == {
        "Acceptance rate: method": "eagle",
        "batch": "1",
        "python": "83.4%",
        "typescript": "79.8%",
        "sql": "82.5%",
        "all": "81.2%",
    }
    assert rows(rate)["draft"]["typescript"] == "56.7%" and rows(tau)["eagle"]["all"] == "3.93"
    depth = rows(tables(section(blocks, "Acceptance by depth, given the depth before was accepted"))[0])
    assert depth["eagle"] == {"Method": "eagle", "batch": "1", "depth 1": "0.62 (5/8)", "depth 2": "0.60 (3/5)", "depth 3": "0.33 (1/3)"}
    # no acceptance pass: the plot shows the timed cells', under them
    assert [b.path for b in section(blocks, "Acceptance in the timed cells") if isinstance(b, Image)] == ["acceptance_by_domain.png"]
    assert not has_section(blocks, "Acceptance by language")


def test_acceptance_pass_table_with_prompt_counts(tmp_path):
    records = [run_record(), *matrix()]
    records += [acceptance_record(lab, {"python": (12, 0.5, 2.0), "sql": (10, 0.25, 1.5)}) for lab in (DRAFT, EAGLE)]
    blocks = report_blocks(write_results(tmp_path / "r.jsonl", records))
    rate = rows(tables(section(blocks, "Acceptance by language"))[0])
    assert rate["draft"] == {
        "Acceptance rate: method": "draft",
        "python": "50.0% (12)",
        "sql": "25.0% (10)",
        "all": f"{100 * 8.5 / 22:.1f}% (22)",
    }
    images = {
        b.path: name
        for name in ("Acceptance by language", "Acceptance in the timed cells")
        for b in section(blocks, name)
        if isinstance(b, Image)
    }
    assert images == {"acceptance_by_domain.png": "Acceptance by language"}


def test_break_even_findings(path):
    blocks = report_blocks(path)
    found = rows(tables(section(blocks, "Findings"))[0])
    s0, s1 = 114.2 / 98.4, 148.6 / 154.2
    crossing = 2 ** (3 + (1 - s0) / (s1 - s0))
    assert 8 < crossing < 16
    draft = found["draft"]
    assert (draft["largest batch with speedup ≥ 1"], draft["first batch with speedup < 1"]) == ("8", "16")
    assert draft["break-even (interpolated)"] == f"{crossing:.1f}"
    assert [found["eagle"][h] for h in list(found["eagle"])[1:4]] == ["16", "—", "—"]
    results = load_results(path)
    assert winners(results)[1][:2] == [(EAGLE, 44.6), (DRAFT, 32.8)]
    assert winner_runs(results) == [(EAGLE, BATCHES)]
    assert not [p for p in paragraphs(section(blocks, "Findings")) if "server setting" in p]  # nothing to switch off


def test_baseline_wins_at_high_batch(tmp_path):
    values = {BASE: [10.0, 19.0, 36.0, 60.0, 100.0], EAGLE: [20.0, 30.0, 40.0, 50.0, 55.0]}
    path = write_results(tmp_path / "res.jsonl", [run_record(), *matrix(values)])
    results, blocks = load_results(path), report_blocks(path)
    assert winner_runs(results) == [(EAGLE, [1, 2, 4]), (BASE, [8, 16])]
    assert (
        rows(tables(section(blocks, "Executive decision matrix"))[0])["eagle"]["Best use (from the numbers)"]
        == "batch ≤ 4; fastest at batch 1–4"
    )
    s0, s1 = 40 / 36, 50 / 60
    assert break_even([(b, results.speedup(EAGLE, b)) for b in BATCHES]).crossing == pytest.approx(2 ** (2 + (1 - s0) / (s1 - s0)))
    assert rows(tables(section(blocks, "Findings"))[0])["eagle"]["break-even (interpolated)"] == f"{2 ** (2 + (1 - s0) / (s1 - s0)):.1f}"
    setting = [p for p in paragraphs(section(blocks, "Findings")) if "`plain_above:4`" in p]
    assert len(setting) == 1 and "`eagle:...,policy=plain_above:4`" in setting[0]


def test_correctness_warning_and_no_baseline(tmp_path):
    records = [run_record(), cell(BASE, 1, 10.0), cell(EAGLE, 1, 20.0, greedy_identical=False)]
    warning = [
        p for p in paragraphs(report_blocks(write_results(tmp_path / "a.jsonl", records))) if p.startswith("**Correctness warning:**")
    ]
    assert len(warning) == 1 and warning[0].endswith("for eagle at batch 1.")
    blocks = report_blocks(write_results(tmp_path / "b.jsonl", [cell(DRAFT, 1, 20.0), cell(DRAFT, 2, 30.0)]))  # no run, no baseline
    assert rows(tables(section(blocks, "Findings"))[0])["draft"]["reading"] == "no baseline at its batch sizes"
    assert rows(tables(section(blocks, "Speed vs concurrency"))[0])["2"]["draft"] == "30.0"


def test_divergences_show_both_runs_margins_against_the_bound(tmp_path):
    """bf16 outputs that part at near-ties are shown as rounding; one that parts where the target was decided warns."""

    def parted(gaps, near, key="chosen_gaps"):  # records older than the chosen-token gaps kept "margins"
        return {"prompt": 0, "token_index": 7, "tokens": [5, 9], "logprob_gap": 0.01, "near_tie": near, "bound": 1.875, key: gaps}

    records = [run_record(), *matrix()]
    records.append(
        cell(DRAFT, 1, 32.8, greedy_identical=False, agreement=0.9, divergences=[parted([0.125, 0.0], True)], all_near_ties=True)
    )
    records.append(
        cell(
            DRAFT, 2, 58.2, greedy_identical=False, agreement=0.5, divergences=[parted([3.5, 0.25], False, "margins")], all_near_ties=False
        )
    )
    blocks = report_blocks(write_results(tmp_path / "results.jsonl", records))
    table = tables(section(blocks, "Greedy agreement: across engines, and where outputs part"))[0]
    assert table.rows == [
        ["draft", "1", "no", "90.0%", "—", "—", "1", "0.0100", "0.125", "1.875", "yes"],
        ["draft", "2", "no", "50.0%", "—", "—", "1", "0.0100", "3.500", "1.875", "NO"],
    ]
    warning = [p for p in paragraphs(blocks) if p.startswith("**Correctness warning:**")]
    assert len(warning) == 1 and warning[0].endswith("for draft at batch 2.")


def test_a_method_under_a_policy_shows_its_budget_and_speedup_at_each_batch_size(tmp_path):
    """A method run under a policy (a file's or auto's) gets a row: its draft budget per batch size, plain where 0.
    A record of an earlier version (``by_batch_size``) reads the same."""
    rules = [{"batch_size": 1, "draft_nodes": 3}, {"batch_size": BATCHES[-1], "draft_nodes": 0}]
    policy = {"draft_budget": rules, "min_acceptance": 0.0, "window": 8, "probe_nodes": 1}
    auto = DRAFT[:-1] + ",policy=auto)"
    records = [run_record(), *matrix(), *(cell(auto, b, t, policy=policy) for b, t in zip(BATCHES, TOK_S[DRAFT]))]
    blocks = report_blocks(write_results(tmp_path / "results.jsonl", records))
    (table,) = tables(section(blocks, "Speculation policies"))
    row = rows(table)["draft-auto"]
    assert [row[f"batch {b}"] for b in BATCHES[:-1]] == [f"3 ({t / base:.2f}x)" for t, base in zip(TOK_S[DRAFT], TOK_S[BASE])][:-1]
    assert row[f"batch {BATCHES[-1]}"] == f"plain ({148.6 / 154.2:.2f}x)"
    assert not has_section(report_blocks(write_results(tmp_path / "plain.jsonl", [run_record(), *matrix()])), "Speculation policies")


def test_blocks_are_typed(path):
    blocks = report_blocks(path)
    assert all(isinstance(b, (Paragraph, Table, Image)) or b.level in (1, 2, 3) for b in blocks)
    assert all(len(row) == len(t.headers) for t in tables(blocks) for row in t.rows)
