"""The benchmark report end to end, from a synthetic results.jsonl: the files, that Markdown and HTML render, the
summary, and reading results.jsonl. What the report says is tested as data in ``tests/bench/report/``."""

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from speculab.bench.report import break_even, build_report, load_results, summary
from tests.bench.report.synthetic import BASE, DRAFT, EAGLE, standard_records, write_results

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("tok_s_vs_batch.png", "speedup_vs_batch.png", "acceptance_by_domain.png")


@pytest.fixture
def results_path(tmp_path):
    truncated = f'{{"kind": "cell", "run_id": "r1", "label": "{EAGLE}", "batch_'  # crash mid-write
    return write_results(tmp_path / "results.jsonl", standard_records(), tail=truncated)


class Page(HTMLParser):
    """The HTML page's tables (cell texts) and images, and whether every tag opened was closed."""

    VOID = {"meta", "img", "br"}

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.open.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        assert self.open.pop() == tag
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def test_report_files_and_pngs(results_path, tmp_path):
    paths = build_report(results_path, tmp_path / "report")
    assert set(paths) == {"report_md", "report_html", "plot_tok_s", "plot_speedup", "plot_acceptance"}
    for key in ("plot_tok_s", "plot_speedup", "plot_acceptance"):
        data = Path(paths[key]).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000


def test_html_renders_tables_and_images(results_path, tmp_path):
    page_text = Path(build_report(results_path, tmp_path / "report")["report_html"]).read_text()
    assert page_text.startswith("<!DOCTYPE html>")
    page = Page()
    page.feed(page_text)
    assert page.open == [] and sorted(page.images) == sorted(PLOTS)
    speed = next(t for t in page.tables if t[0][:2] == ["batch", "baseline"])
    assert speed[1] == ["1", "18.2", f"32.8 ({32.8 / 18.2:.2f}×)", f"44.6 ({44.6 / 18.2:.2f}×)"]
    methods = next(t for t in page.tables if t[0] == ["Label", "Method", "Full settings"])
    assert methods[1:] == [["baseline", "baseline", "baseline"], ["draft", "draft", DRAFT], ["eagle", "eagle", EAGLE]]


def test_markdown_renders_headings_tables_and_images(results_path, tmp_path):
    md = Path(build_report(results_path, tmp_path / "r")["report_md"]).read_text()
    headings = re.findall(r"^(#+) (.+)$", md, flags=re.M)
    assert headings[0] == ("#", "speculab benchmark report — run r1")
    assert ("##", "Methods") in headings and ("##", "Findings") in headings
    assert sorted(re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)) == sorted(PLOTS)
    speed = md.split("## Speed vs concurrency")[1]
    table = [line for line in speed.splitlines() if line.startswith("|")][:3]
    assert table[0] == "| batch | baseline | draft | eagle |" and table[1] == "|---|---|---|---|"
    assert table[2] == f"| 1 | 18.2 | 32.8 ({32.8 / 18.2:.2f}×) | 44.6 ({44.6 / 18.2:.2f}×) |"


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


def test_summary(results_path):
    s = summary(results_path)
    json.dumps(s)
    assert s["run_id"] == "r1" and s["baseline"] == BASE
    assert list(s["cells"]) == [BASE, DRAFT, EAGLE]  # the full labels, as results.jsonl has them
    assert s["short_labels"] == {BASE: "baseline", DRAFT: "draft", EAGLE: "eagle"}
    eagle1 = s["cells"][EAGLE]["1"]
    assert eagle1["tok_s"] == 44.6 and eagle1["speedup"] == pytest.approx(44.6 / 18.2)
    assert eagle1["tau"] == 3.93 and eagle1["acceptance_rate"] == 0.812
    assert s["cells"][BASE]["16"]["speedup"] == 1.0
    assert s["break_even"][DRAFT]["first_slower"] == 16
    assert math.isclose(s["break_even"][DRAFT]["crossing"], 2 ** (3 + (1 - 114.2 / 98.4) / (148.6 / 154.2 - 114.2 / 98.4)))


def test_summary_without_a_baseline(tmp_path):
    from tests.bench.report.synthetic import cell

    path = write_results(tmp_path / "b.jsonl", [cell(DRAFT, 1, 20.0), cell(DRAFT, 2, 30.0)])
    assert summary(path)["cells"][DRAFT]["2"]["speedup"] is None
    assert set(build_report(path, tmp_path / "b")) == {"report_md", "report_html", "plot_tok_s", "plot_speedup", "plot_acceptance"}


def test_load_results_tolerates_truncation_only_as_skipped(results_path):
    results = load_results(results_path)
    assert results.skipped_lines == [len(standard_records()) + 1]
    assert len(results.cells) == 15 and results.run["testbed"]["cpu"] == "Resumed CPU"
