"""The speedup heatmap (matplotlib's Agg through Figure, no pyplot state): for a run of several contexts, one panel per
speculative method, batch size across, context up, each cell coloured by its speedup over plain decoding on a diverging
map centred at 1.0 and annotated with it.

Knows: each context's speedups (``Results.views``, ``Results.measured_speedup``: never across contexts), the cells
skipped for memory (``Results.not_run``: hatched, marked "skipped") and the ones not measured (hatched, a dash).
Does not know: how a speedup was measured, or the report's text.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from speculab.bench.report.numbers import DASH, context_name
from speculab.bench.report.results import Results, record_context

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HEATMAP_FILE = "speedup_heatmap.png"
COLUMNS = 3  # panels a row
COLOURS = "RdBu"  # red below 1 (slower than plain decoding), blue above
SKIPPED, BASE_SKIPPED = "skipped", "baseline\nskipped"  # for memory (``skipped`` records)
HATCH_COLOUR = "#999999"
TICKS = (0.25, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 8.0)  # the colour bar's, those within its reach


def _grid(results: Results, label: str) -> list[list[float | None]]:
    """Speedups by context (rows, ``contexts`` order) and batch size (columns, ``all_batch_sizes``)."""
    return [[view.speedup(label, b) for b in results.all_batch_sizes] for view in results.views]


def _reach(grids: list[list[list[float | None]]]) -> float:
    """How far from 1.0 the colour scale reaches each way, in log2 of the speedup: colour follows the log so that 0.5×
    is as red as 2× is blue (a linear scale would paint 0.8× as dark as 2.5×)."""
    values = [abs(math.log2(v)) for grid in grids for row in grid for v in row if v is not None and v > 0]
    return max([*values, math.log2(1.05)])


def heatmap_figure(results: Results) -> Figure | None:
    """The heatmap where the run has several contexts and a speculative method; else None."""
    from matplotlib.figure import Figure

    spec = [lab for lab in results.labels if not results.is_baseline(lab)]
    if not results.several_contexts or not spec:
        return None
    grids = [_grid(results, lab) for lab in spec]
    reach = _reach(grids)
    columns = min(len(spec), COLUMNS)
    rows = math.ceil(len(spec) / columns)
    batches, contexts = results.all_batch_sizes, results.contexts
    width = max(6.0, columns * (1.0 + 0.75 * len(batches)) + 1.5)
    fig = Figure(figsize=(width, 0.8 + rows * (1.4 + 0.55 * len(contexts))), dpi=110, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    fig.suptitle("Speedup over plain decoding by batch size and context length", fontsize=12)
    skipped = {(r["label"], int(r["batch_size"]), record_context(r)) for r in results.not_run}
    image = None
    for ax, label, grid in zip(axes.flat, spec, grids):
        logs = [[math.nan if v is None or v <= 0 else math.log2(v) for v in row] for row in grid]
        image = ax.imshow(logs, cmap=COLOURS, vmin=-reach, vmax=reach, origin="lower", aspect="auto")
        base = results.baseline_of(label)
        for i, context in enumerate(contexts):
            for j, batch in enumerate(batches):
                mark = SKIPPED if (label, batch, context) in skipped else BASE_SKIPPED if (base, batch, context) in skipped else DASH
                _annotate(ax, i, j, grid[i][j], reach, mark)
        ax.set_title(results.short(label), fontsize=10)
        ax.set_xticks(range(len(batches)), [str(b) for b in batches])
        ax.set_yticks(range(len(contexts)), [context_name(results, c) for c in contexts])
        ax.set_xlabel("batch size", fontsize=9)
        ax.set_ylabel("median prompt tokens", fontsize=9)
    for ax in list(axes.flat)[len(spec) :]:
        ax.set_visible(False)
    bar = fig.colorbar(image, ax=axes, label="speedup (×, log scale); 1 = plain decoding", shrink=0.9)
    ticks = [t for t in TICKS if abs(math.log2(t)) <= reach]
    bar.set_ticks([math.log2(t) for t in ticks], labels=[f"{t:g}" for t in ticks])
    return fig


def _annotate(ax, row: int, column: int, value: float | None, reach: float, mark: str) -> None:
    """The speedup written on its cell, in white where the colour is dark; a cell without one hatched, ``mark`` on it."""
    from matplotlib.patches import Rectangle

    if value is None:
        ax.add_patch(Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, hatch="//", edgecolor=HATCH_COLOUR, linewidth=0))
        ax.text(column, row, mark, ha="center", va="center", fontsize=7, color="#444444")
        return
    dark = value > 0 and abs(math.log2(value)) > 0.6 * reach
    ax.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=9, color="white" if dark else "black")
