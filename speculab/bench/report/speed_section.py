"""The report's speed section: tok/s and speedup at every batch size, and every cell's figures.

Knows: the cells' speed and latency fields, and how the run's speedups were measured (``speedups.py``), said once
under the table. Does not know: rendering, or how the cells were timed beyond what they recorded.
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Image, Paragraph, Table
from speculab.bench.report.numbers import DASH, count, ms, num, pct, size, tok_x
from speculab.bench.report.plots import PLOT_FILES
from speculab.bench.report.results import Results
from speculab.bench.report.speedups import Timing, timing


def run_timing(results: Results) -> Timing:
    """How this run's speedups were measured: every speculative label's at every batch size it shares with its baseline."""
    found = [results.measured_speedup(lab, b) for lab in results.labels if not results.is_baseline(lab) for b in results.batches_of(lab)]
    return timing([s for s in found if s is not None])


def _detail_table(results: Results) -> Table:
    """Every cell's figures, one row a (label, batch size)."""
    labels = results.labels
    detail = []
    for lab, b in sorted(results.cells, key=lambda k: (labels.index(k[0]), k[1])):
        c = results.cells[(lab, b)]
        gi = c.get("greedy_identical")
        detail.append(
            [
                results.short(lab),
                str(b),
                count(c.get("num_prompts")),
                count(c.get("repeats")),
                count(c.get("output_tokens")),
                num(c.get("wall_s"), 2),
                num(c.get("tok_s")),
                num(c.get("tok_s_per_request"), 2),
                ms(c.get("ttft_p50_s")),
                ms(c.get("ttft_p99_s")),
                ms(c.get("queue_p50_s")),
                ms(c.get("tpot_p50_s")),
                ms(c.get("tpot_p99_s")),
                ms(c.get("itl_p50_s")),
                ms(c.get("itl_p99_s")),
                num(c.get("tau"), 2),
                pct(c.get("acceptance_rate")),
                size(c.get("peak_rss_bytes")),
                DASH if gi is None else ("yes" if gi else "NO"),
                pct(c.get("agreement")),
            ]
        )
    detail_headers = [
        "label",
        "batch",
        "prompts",
        "repeats",
        "output tokens",
        "wall s",
        "tok/s",
        "tok/s/request",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "queue p50 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "ITL p50 ms",
        "ITL p99 ms",
        "τ",
        "acceptance",
        "peak RSS",
        "greedy identical",
        "agreement",
    ]
    return Table(detail_headers, detail, "the `cell` record of each (label, batch_size), the same-named fields; latencies in ms")


def speed_blocks(results: Results) -> list[Block]:
    labels = results.labels
    rows = [[str(b), *(tok_x(results, lab, b) for lab in labels)] for b in results.batch_sizes]
    return [
        Heading(2, "Speed vs concurrency"),
        Table(
            ["batch", *map(results.short, labels)],
            rows,
            "`cell.tok_s` (output tok/s, median over repeats); in parentheses the speedup over the baseline at that batch "
            "size, measured as the sentence below says; each batch size's prompts: the detail table "
            "(`run.prompts_per_batch`, sized to the run's time limit)",
        ),
        Paragraph(run_timing(results).text),
        Image(PLOT_FILES["tok_s"], "Output tok/s vs batch size"),
        Image(PLOT_FILES["speedup"], "Speedup vs batch size"),
        Heading(3, "Every cell"),
        _detail_table(results),
    ]
