"""The report's PNG plots (matplotlib's Agg through Figure, no pyplot state): tok/s and speedup against
batch size, acceptance by language, and for a run of several contexts the speedup heatmap (``heatmap.py``).

Knows: what each plot shows, by short label (``labels.py``), each label in one colour in every plot, each context in
one line style (solid the first, named in the legend), legends below the axes inside the image. Does not know: where
the figures come from (``results.py``, ``speedups.py``, ``acceptance_data.py``) or the report's text.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from speculab.bench.report.acceptance_data import acceptance_bars
from speculab.bench.report.heatmap import HEATMAP_FILE, heatmap_figure
from speculab.bench.report.numbers import context_name
from speculab.bench.report.results import Results
from speculab.bench.report.speedups import timing

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_FILES = {
    "tok_s": "tok_s_vs_batch.png",
    "speedup": "speedup_vs_batch.png",
    "acceptance": "acceptance_by_domain.png",
    "heatmap": HEATMAP_FILE,
}
SIZE, DPI = (8.0, 4.8), 110
LEGEND_COLUMNS = 5
BASELINE_LINE = "baseline = 1"
CONTEXT_ENTRY = "context "  # a legend entry naming a context's line style
LINE_STYLES = ("-", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))  # by context, in ``Results.contexts`` order; "--" is the baseline's


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
    # the methods, then the contexts' line styles, the reference line last
    order = sorted(range(len(names)), key=lambda i: (names[i] == BASELINE_LINE, names[i].startswith(CONTEXT_ENTRY)))
    handles, names = [handles[i] for i in order], [names[i] for i in order]
    ncols = len(handles) if len(handles) <= LEGEND_COLUMNS else math.ceil(len(handles) / 2)
    fig.legend(handles, names, loc="outside lower center", ncols=ncols, frameon=False, fontsize=9)


def _batch_axis(ax, batches: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_xlabel("batch size (concurrent requests)")


def _styled(results: Results) -> list[tuple[Results, str]]:
    """Each context's view and its line style; one context: solid, as runs of one context always were."""
    return [(view, LINE_STYLES[i % len(LINE_STYLES)]) for i, view in enumerate(results.views)] or [(results, "-")]


def _context_legend(results: Results, ax) -> None:
    """A grey line per context in the legend, where there are several (the methods' lines name only their colour)."""
    if results.several_contexts:
        for view, style in _styled(results):
            ax.plot([], [], color="#444444", linestyle=style, label=f"{CONTEXT_ENTRY}{context_name(results, view.context)}")


def _named(label: str, drawn: set[str], results: Results) -> str:
    """The legend entry for a label's first line; its lines at other contexts stay out of the legend."""
    if label in drawn:
        return "_nolegend_"
    drawn.add(label)
    return results.short(label)


def tok_s_figure(results: Results) -> Figure:
    subtitle = "median over repeats (cell.tok_s)" + ("; line style: context" if results.several_contexts else "")
    fig, ax = _figure("Output tok/s by batch size", subtitle)
    drawn: set[str] = set()
    for view, style in _styled(results):
        for label in view.labels:
            pts = [(b, view.tok_s(label, b)) for b in view.batches_of(label)]
            pts = [(b, v) for b, v in pts if v is not None]
            if pts:
                ax.plot(
                    [b for b, _ in pts],
                    [v for _, v in pts],
                    marker="o",
                    linestyle=style,
                    label=_named(label, drawn, results),
                    color=color(results, label),
                )
    _context_legend(results, ax)
    _batch_axis(ax, results.all_batch_sizes)
    ax.set_ylabel("output tok/s")
    _legend(fig, ax)
    return fig


def _speedup_subtitle(results: Results, found: list) -> str:
    how = timing([s for _, _, _, s in found if s is not None])
    if how.paired and not how.separate:
        subtitle = "median of the per-round ratios; bars: lowest to highest round"
    elif how.separate and not how.paired:
        subtitle = "ratio of medians from separate cells; bars: slowest to fastest repeat"
    elif how.paired:
        subtitle = "paired by round where timed in rounds, else a ratio of medians; bars: the spread"
    else:
        subtitle = "no speedups: no method beside a baseline at one batch size"
    return subtitle + ("; line style: context" if results.several_contexts else "")


def speedup_figure(results: Results) -> Figure:
    styled = _styled(results)
    found = [
        (i, lab, b, view.measured_speedup(lab, b))
        for i, (view, _) in enumerate(styled)
        for lab in view.labels
        if not view.is_baseline(lab)
        for b in view.batches_of(lab)
    ]
    fig, ax = _figure("Speedup over the baseline by batch size", _speedup_subtitle(results, found))
    drawn: set[str] = set()
    for i, (_, style) in enumerate(styled):
        for label in dict.fromkeys(lab for at, lab, _, s in found if at == i and s is not None):
            pts = [(b, s) for at, lab, b, s in found if at == i and lab == label and s is not None]
            ys = [s.value for _, s in pts]
            below = [s.value - s.low if s.low is not None else 0.0 for _, s in pts]
            above = [s.high - s.value if s.high is not None else 0.0 for _, s in pts]
            ax.errorbar(
                [b for b, _ in pts],
                ys,
                yerr=[below, above],
                marker="o",
                capsize=3,
                linestyle=style,
                label=_named(label, drawn, results),
                color=color(results, label),
            )
    _context_legend(results, ax)
    ax.axhline(1.0, color="grey", linestyle="--", label=BASELINE_LINE, zorder=1)
    _batch_axis(ax, results.all_batch_sizes)
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
    figures = {"tok_s": tok_s_figure(results) if results.all_cells else None}
    figures["speedup"] = speedup_figure(results) if results.all_cells else None
    figures["acceptance"] = acceptance_figure(results)
    figures["heatmap"] = heatmap_figure(results)
    paths: dict[str, Path] = {}
    for key, fig in figures.items():
        if fig is not None:
            paths[key] = out_dir / PLOT_FILES[key]
            fig.savefig(paths[key], format="png")
    return paths
