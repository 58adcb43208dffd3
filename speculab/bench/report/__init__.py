"""The benchmark report from results.jsonl: report.md, a self-contained report.html, PNG plots, a summary dict.

Every number in the report is a results.jsonl field or computed from fields named next to the table; no
figure is canned. Modules: ``results`` (reading results.jsonl: cells by label, batch size and context length),
``speedups`` (a speedup, paired by round or not, and how the run's were measured), ``labels`` (short labels),
``findings`` (break-even points, winners, the recommendation), ``numbers`` (formatting, a context's name included),
``sections`` and the ``*_section`` modules (what the report says, as typed blocks), ``acceptance_data`` (the
acceptance figures plotted), ``blocks`` (the block types, Markdown and HTML), ``plots`` and ``heatmap`` (PNG).

Does not know: how cells were measured (``speculab.bench.in_process``, ``speculab.bench.over_http``) or how
memory is estimated (``speculab.models.memory``); it reads what they stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speculab.bench.report.blocks import Image, to_html, to_markdown
from speculab.bench.report.findings import BreakEven, break_even, winners
from speculab.bench.report.numbers import DASH, context_name
from speculab.bench.report.plots import plot
from speculab.bench.report.results import Results, load_results
from speculab.bench.report.sections import document

__all__ = ["BreakEven", "Results", "break_even", "build_report", "load_results", "summary", "winners"]


def build_report(results_path: str | Path, out_dir: str | Path) -> dict[str, str]:
    """Write report.md, report.html and the PNG plots into ``out_dir``; returns {name: path}."""
    results = load_results(results_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = plot(results, out)
    blocks = [b for b in document(results) if not isinstance(b, Image) or b.path in {p.name for p in plots.values()}]
    md, page = out / "report.md", out / "report.html"
    md.write_text(to_markdown(blocks))
    page.write_text(to_html(blocks, f"speculab benchmark report — run {(results.run or {}).get('run_id', DASH)}"))
    return {"report_md": str(md), "report_html": str(page), **{f"plot_{k}": str(p) for k, p in plots.items()}}


def _cells_and_breaks(results: Results) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, dict[str, Any]]]:
    """One context's {label: {batch: figures}} and {label: break-even}."""
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    breaks: dict[str, dict[str, Any]] = {}
    for label in results.labels:
        cells[label] = {
            str(b): {
                "tok_s": results.tok_s(label, b),
                "speedup": results.speedup(label, b),
                "tau": results.cells[(label, b)].get("tau"),
                "acceptance_rate": results.cells[(label, b)].get("acceptance_rate"),
            }
            for b in results.batches_of(label)
        }
        if not results.is_baseline(label):
            be = break_even([(b, results.speedup(label, b)) for b in results.batches_of(label)])
            breaks[label] = {"last_faster": be.last_faster, "first_slower": be.first_slower, "crossing": be.crossing}
    return cells, breaks


def summary(results_path: str | Path) -> dict[str, Any]:
    """Per label (the full one) and batch size: tok_s, speedup, tau, acceptance_rate; each label's break-even and its
    short form in the report; all at the first context (``Results.contexts``), and under ``by_context`` at each (the
    context, its name in the report, its median prompt tokens, its cells and break-evens). JSON-serialisable."""
    results = load_results(results_path)
    cells, breaks = _cells_and_breaks(results)
    by_context = []
    for view in results.views:
        view_cells, view_breaks = _cells_and_breaks(view)
        by_context.append(
            {
                "context": view.context,
                "name": context_name(results, view.context),
                "context_tokens": results.context_tokens(view.context),
                "cells": view_cells,
                "break_even": view_breaks,
            }
        )
    return {
        "run_id": (results.run or {}).get("run_id"),
        "baseline": results.baseline_label,
        "short_labels": results.short_names,
        "cells": cells,
        "break_even": breaks,
        "contexts": results.contexts,
        "by_context": by_context,
    }
