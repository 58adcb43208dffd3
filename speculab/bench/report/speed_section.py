"""The report's speed section: tok/s and speedup at every batch size, a table per context where the run has several,
and every cell's figures.

Knows: the cells' speed and latency fields, and how the run's speedups were measured (``speedups.py``), said once
under the tables; each context by its heading (``contexts_section.py``). Does not know: rendering, or how the cells
were timed beyond what they recorded.
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Image, Paragraph, Table
from speculab.bench.report.contexts_section import context_about, context_heading
from speculab.bench.report.numbers import DASH, context_name, count, ms, num, pct, size, tok_x
from speculab.bench.report.plots import PLOT_FILES
from speculab.bench.report.results import Results
from speculab.bench.report.speedups import Timing, timing


def run_timing(results: Results) -> Timing:
    """How this run's speedups were measured: every speculative label's at every batch size and context it shares with
    its baseline."""
    found = [
        view.measured_speedup(lab, b)
        for view in results.views or [results]
        for lab in view.labels
        if not view.is_baseline(lab)
        for b in view.batches_of(lab)
    ]
    return timing([s for s in found if s is not None])


def _detail_table(results: Results) -> Table:
    """Every cell's figures, one row a (label, batch size), and with several contexts a (label, context, batch size)."""
    labels, several = results.labels, results.several_contexts
    detail = []
    keys = sorted(results.all_cells, key=lambda k: (labels.index(k[0]), results.contexts.index(k[2]), k[1]))
    for lab, b, ctx in keys:
        c = results.all_cells[(lab, b, ctx)]
        gi = c.get("greedy_identical")
        detail.append(
            [
                results.short(lab),
                *([context_name(results, ctx)] if several else []),
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
        *(["context"] if several else []),
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
    key = "(label, context, batch_size)" if several else "(label, batch_size)"
    return Table(detail_headers, detail, f"the `cell` record of each {key}, the same-named fields; latencies in ms")


def _speed_table(results: Results) -> Table:
    """This context's tok/s and speedups: a row a batch size, a column a label."""
    labels = results.labels
    rows = [[str(b), *(tok_x(results, lab, b) for lab in labels)] for b in results.batch_sizes]
    # runs that measure contexts size each (context, batch size); older ones sized each batch size
    sized = "prompts_per_cell" if "prompts_per_cell" in (results.run or {}) else "prompts_per_batch"
    return Table(
        ["batch", *map(results.short, labels)],
        rows,
        "`cell.tok_s` (output tok/s, median over repeats); in parentheses the speedup over the baseline at that batch "
        "size" + (" and context" if results.several_contexts else "") + ", measured as the sentence below says; each batch "
        f"size's prompts: the detail table (`run.{sized}`, sized to the run's time limit)",
    )


def speed_blocks(results: Results) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Speed vs concurrency")]
    if results.several_contexts:
        for view in results.views:
            blocks += [Heading(3, context_heading(results, view.context)), _speed_table(view)]
    else:
        if results.context is not None:  # one context, not the workload's prompts as they are: say which
            blocks.append(Paragraph(f"Every prompt: {context_about(results, results.context)} (`cell.context`)."))
        blocks.append(_speed_table(results))
    return [
        *blocks,
        Paragraph(run_timing(results).text),
        Image(PLOT_FILES["tok_s"], "Output tok/s vs batch size"),
        Image(PLOT_FILES["speedup"], "Speedup vs batch size"),
        Heading(3, "Every cell"),
        _detail_table(results),
    ]
