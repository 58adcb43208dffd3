"""The report's section on context length, for a run of several: what each context is, where each method stops
paying at each (the crossover table), the speedups as a heatmap of batch size by context, and each drafter's
acceptance at each context (a drafter trained on short prompts may draft worse after long ones).

Knows: each context's cells (``Results.views``), named by their median prompt length (``numbers.context_name``),
each method's break-even at each (``findings.break_even``), and what a context is: the workload's requests as they
are, or preceded by whole repository files up to the length asked for. Does not know: how the files were chosen
(``speculab.bench.contexts``), how the heatmap is drawn (``heatmap.py``), or rendering.
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Image, Paragraph, Table
from speculab.bench.report.findings import break_even
from speculab.bench.report.numbers import DASH, context_name, count, num, pct, times
from speculab.bench.report.plots import PLOT_FILES
from speculab.bench.report.results import Context, Results, acceptance_cell

NEVER_PAYS = "never pays"
ALWAYS_PAYS = "pays at every batch measured"


def context_about(results: Results, context: Context) -> str:
    """What the context's prompts are, and their median length where the cells recorded it."""
    tokens = results.context_tokens(context)
    median = f", median prompt {count(tokens)} tokens" if tokens is not None else ""
    if context is None:
        return f"the workload's prompts as they are{median}"
    return f"whole repository files before each request, up to {count(context)} tokens{median}"


def contexts_about(results: Results) -> str:
    """Every context, named, and what it is: ``1.2k: the workload's prompts as they are, ...; 4.1k: ...``."""
    return "; ".join(f"{context_name(results, c)}: {context_about(results, c)}" for c in results.contexts)


def context_heading(results: Results, context: Context) -> str:
    return f"Context {context_name(results, context)} ({context_about(results, context)})"


def crossover(results: Results, label: str) -> str:
    """Where ``label`` stops paying at this context: the first measured batch size whose speedup is below 1 (that
    speedup in brackets), or that it pays at every batch measured, or never pays; a dash without a speedup."""
    points = [(b, results.speedup(label, b)) for b in results.batches_of(label)]
    measured = [(b, s) for b, s in points if s is not None]
    if not measured:
        return DASH
    be = break_even(measured)
    if be.first_slower is None:
        return f"{ALWAYS_PAYS} (up to {be.last_faster})"
    if be.last_faster is None:
        return f"{NEVER_PAYS} ({measured[0][0]}–{measured[-1][0]})" if len(measured) > 1 else f"{NEVER_PAYS} ({measured[0][0]})"
    text = f"{be.first_slower} ({times(dict(measured)[be.first_slower])})"
    return text + (f"; ≥ 1 again at {be.last_faster}" if be.recovers else "")


def context_blocks(results: Results) -> list[Block]:
    """The section, for a run of several contexts; nothing for one."""
    if not results.several_contexts:
        return []
    spec = [lab for lab in results.labels if not results.is_baseline(lab)]
    missing = [c for c in results.asked_contexts if c not in results.contexts]
    lead = (
        "Each context repeats the workload's requests, preceded by whole repository files up to the context length asked for "
        "(`run.config.contexts`, `cell.context`), as coding agents send them; it is named by its cells' median prompt length "
        f"in target tokens (`cell.context_tokens`). {contexts_about(results)}. A speedup is over the baseline at the same batch size and context."
    )
    if missing:
        lead += " Asked for, with no cell recorded: " + ", ".join("as written" if c is None else count(c) for c in missing) + "."
    rows = [[results.short(lab), *(crossover(view, lab) for view in results.views)] for lab in spec]
    source = (
        "the speed tables' speedups at each context: the first measured batch size whose speedup is below 1 and, in "
        "brackets, that speedup; in brackets after a method that pays at every batch or never, the batch sizes measured"
    )
    blocks: list[Block] = [Heading(2, "Speedup by context length"), Paragraph(lead)]
    if spec:
        blocks += [
            Heading(3, "Where speculation stops paying"),
            Table(["Method", *(f"stops paying at batch, context {context_name(results, c)}" for c in results.contexts)], rows, source),
            Image(PLOT_FILES["heatmap"], "Speedup over plain decoding by batch size and context length"),
            *acceptance_by_context(results, spec),
        ]
    return blocks


def acceptance_by_context(results: Results, spec: list[str]) -> list[Block]:
    """Each drafting label's τ and acceptance rate at each context, and its τ at the longest over the shortest."""
    rows = []
    for lab in spec:
        cells = [acceptance_cell(view, lab) for view in results.views]
        taus = [c.get("tau") for c in cells]
        ratio = taus[-1] / taus[0] if taus[0] and taus[-1] is not None else None
        batches = sorted({c["batch_size"] for c in cells if "batch_size" in c})
        shown = [f"{num(c['tau'], 2)} ({pct(c.get('acceptance_rate'))})" if c.get("tau") is not None else DASH for c in cells]
        rows.append([results.short(lab), ", ".join(map(str, batches)) or DASH, *shown, num(ratio, 2) if ratio is not None else DASH])
    first, last = (context_name(results, c) for c in (results.contexts[0], results.contexts[-1]))
    headers = ["Method", "batch", *(f"τ (acceptance rate), context {context_name(results, c)}" for c in results.contexts)]
    source = (
        "`cell.tau` and `cell.acceptance_rate` of each label's smallest measured batch size at each context; the last "
        f"column: τ at {last} over τ at {first}"
    )
    return [Heading(3, "Acceptance by context length"), Table([*headers, f"τ {last} / τ {first}"], rows, source)]
