"""The report's PNG plots (matplotlib's Agg through Figure, no pyplot state): tok/s and speedup against
batch size, acceptance by language."""

from __future__ import annotations

import math
from pathlib import Path

from speculab.bench.report.results import Results, acceptance_cell, domains_of

PLOT_FILES = {"tok_s": "tok_s_vs_batch.png", "speedup": "speedup_vs_batch.png", "acceptance": "acceptance_by_domain.png"}


def color(labels: list[str], label: str) -> str:
    """The same colour for a label in every plot."""
    return f"C{labels.index(label) % 10}"


def plot(results: Results, out_dir: Path) -> dict[str, Path]:
    # No pyplot: no global backend state; Figure.savefig renders PNG with Agg.
    from matplotlib.figure import Figure

    paths: dict[str, Path] = {}
    labels, batches = results.labels, results.batch_sizes
    for key, ylabel, values in (("tok_s", "output tok/s", results.tok_s), ("speedup", "speedup vs baseline", results.speedup)):
        fig = Figure(figsize=(7, 4.2), dpi=110)
        ax = fig.subplots()
        for label in labels:
            pts = [(b, values(label, b)) for b in results.batches_of(label)]
            pts = [(b, v) for b, v in pts if v is not None]
            if pts and not (key == "speedup" and results.is_baseline(label)):
                ax.plot([b for b, _ in pts], [v for _, v in pts], marker="o", label=label, color=color(labels, label))
        if key == "speedup":
            ax.axhline(1.0, color="grey", linestyle="--", label="baseline = 1")
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch size (concurrent requests)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} by batch size (results.jsonl: cell.tok_s)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        fig.tight_layout()
        paths[key] = out_dir / PLOT_FILES[key]
        fig.savefig(paths[key], format="png")
    spec = [lab for lab in labels if not results.is_baseline(lab)]
    domains = domains_of(results, "acceptance_by_domain")
    if spec:
        fig = Figure(figsize=(7, 4.2), dpi=110)
        ax = fig.subplots()
        groups = domains + ["all"]
        width = 0.8 / len(spec)
        for i, label in enumerate(spec):
            cell = acceptance_cell(results, label)
            vals = [(cell.get("acceptance_by_domain") or {}).get(d) for d in domains] + [cell.get("acceptance_rate")]
            xs = [g + (i - (len(spec) - 1) / 2) * width for g in range(len(groups))]
            ax.bar(xs, [math.nan if v is None else 100 * v for v in vals], width=width, label=label, color=color(labels, label))
        ax.set_xticks(range(len(groups)), groups)
        ax.set_ylabel("acceptance rate (%)")
        ax.set_ylim(0, 100)
        ax.set_title("acceptance rate by domain (cell.acceptance_by_domain, smallest batch)")
        ax.legend()
        fig.tight_layout()
        paths["acceptance"] = out_dir / PLOT_FILES["acceptance"]
        fig.savefig(paths["acceptance"], format="png")
    return paths


# ---------------------------------------------------------------- entry points
