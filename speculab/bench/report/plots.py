"""The report's PNG plots (matplotlib's Agg through Figure, no pyplot state): tok/s and speedup against
batch size, acceptance by language.

Knows: what each plot shows, by short label (``labels.py``), each label in one colour in every plot, legends below
the axes inside the image. Does not know: where the figures come from (``results.py``, ``speedups.py``,
``acceptance_data.py``) or the report's text.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from speculab.bench.report.acceptance_data import acceptance_bars
from speculab.bench.report.results import Results
from speculab.bench.report.speedups import timing

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_FILES = {"tok_s": "tok_s_vs_batch.png", "speedup": "speedup_vs_batch.png", "acceptance": "acceptance_by_domain.png"}
SIZE, DPI = (8.0, 4.8), 110
LEGEND_COLUMNS = 5
BASELINE_LINE = "baseline = 1"


def color(results: Results, label: str) -> str:
    """The same colour for a label in every plot."""
    labels = results.all_labels
    return f"C{labels.index(label) % 10}" if label in labels else "C9"


def _figure(title: str, subtitle: str) -> tuple[Figure, object]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE, dpi=DPI, layout="constrained")
    ax = fig.subplots()
    fig.suptitle(title, fontsize=12)
    ax.set_title(subtitle, fontsize=9, color="#555555")
    ax.grid(alpha=0.3)
    return fig, ax


def _legend(fig: Figure, ax) -> None:
    """Below the axes, inside the image: one row where it fits, else in columns of two, filled down (a method's
    settings side by side)."""
    handles, names = ax.get_legend_handles_labels()
    if not handles:
        return
    order = sorted(range(len(names)), key=lambda i: names[i] == BASELINE_LINE)  # the reference line last
    handles, names = [handles[i] for i in order], [names[i] for i in order]
    ncols = len(handles) if len(handles) <= LEGEND_COLUMNS else math.ceil(len(handles) / 2)
    fig.legend(handles, names, loc="outside lower center", ncols=ncols, frameon=False, fontsize=9)


def _batch_axis(ax, batches: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_xlabel("batch size (concurrent requests)")


def tok_s_figure(results: Results) -> Figure:
    fig, ax = _figure("Output tok/s by batch size", "median over repeats (cell.tok_s)")
    for label in results.labels:
        pts = [(b, results.tok_s(label, b)) for b in results.batches_of(label)]
        pts = [(b, v) for b, v in pts if v is not None]
        if pts:
            ax.plot([b for b, _ in pts], [v for _, v in pts], marker="o", label=results.short(label), color=color(results, label))
    _batch_axis(ax, results.batch_sizes)
    ax.set_ylabel("output tok/s")
    _legend(fig, ax)
    return fig


def speedup_figure(results: Results) -> Figure:
    found = [
        (lab, b, results.measured_speedup(lab, b))
        for lab in results.labels
        if not results.is_baseline(lab)
        for b in results.batches_of(lab)
    ]
    how = timing([s for _, _, s in found if s is not None])
    if how.paired and not how.separate:
        subtitle = "median of the per-round ratios; bars: lowest to highest round"
    elif how.separate and not how.paired:
        subtitle = "ratio of medians from separate cells; bars: slowest to fastest repeat"
    elif how.paired:
        subtitle = "paired by round where timed in rounds, else a ratio of medians; bars: the spread"
    else:
        subtitle = "no speedups: no method beside a baseline at one batch size"
    fig, ax = _figure("Speedup over the baseline by batch size", subtitle)
    for label in dict.fromkeys(lab for lab, _, s in found if s is not None):
        pts = [(b, s) for lab, b, s in found if lab == label and s is not None]
        ys = [s.value for _, s in pts]
        below = [s.value - s.low if s.low is not None else 0.0 for _, s in pts]
        above = [s.high - s.value if s.high is not None else 0.0 for _, s in pts]
        ax.errorbar(
            [b for b, _ in pts], ys, yerr=[below, above], marker="o", capsize=3, label=results.short(label), color=color(results, label)
        )
    ax.axhline(1.0, color="grey", linestyle="--", label=BASELINE_LINE, zorder=1)
    _batch_axis(ax, results.batch_sizes)
    ax.set_ylabel("speedup (×)")
    _legend(fig, ax)
    return fig


def acceptance_figure(results: Results) -> Figure | None:
    bars = acceptance_bars(results)
    if bars is None or not bars.rates:
        return None
    fig, ax = _figure(bars.title, bars.subtitle)
    width = 0.8 / len(bars.rates)
    for i, (label, rates) in enumerate(bars.rates.items()):
        xs = [g + (i - (len(bars.rates) - 1) / 2) * width for g in range(len(bars.groups))]
        heights = [math.nan if v is None else 100 * v for v in rates]
        ax.bar(xs, heights, width=width, label=results.short(label), color=color(results, label))
    ax.set_xticks(range(len(bars.groups)), [bars.tick(g) for g in bars.groups])
    ax.set_ylabel("acceptance rate (%)")
    ax.set_ylim(0, 100)
    _legend(fig, ax)
    return fig


def plot(results: Results, out_dir: Path) -> dict[str, Path]:
    """Write the plots there are data for; {key: path}."""
    figures = {"tok_s": tok_s_figure(results) if results.cells else None}
    figures["speedup"] = speedup_figure(results) if results.cells else None
    figures["acceptance"] = acceptance_figure(results)
    paths: dict[str, Path] = {}
    for key, fig in figures.items():
        if fig is not None:
            paths[key] = out_dir / PLOT_FILES[key]
            fig.savefig(paths[key], format="png")
    return paths
