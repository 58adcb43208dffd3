"""The report's section on cells the machine's memory could not hold: each with its reason and bytes, and its context
where the run has several.

Knows: the ``skipped`` records ``speculab bench`` writes in their place (``bench/memory_fit.py``), and the cells
measured with one engine alive at a time. Does not know: how the fit was decided.
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.numbers import context_name, size
from speculab.bench.report.results import Results, record_context


def not_run_blocks(results: Results) -> list[Block]:
    several = results.several_contexts
    alone = sorted(
        {(b, ctx) for (_, b, ctx), c in results.all_cells.items() if (c.get("memory") or {}).get("rounds", "in turns") != "in turns"},
        key=lambda k: (results.contexts.index(k[1]), k[0]),
    )
    if not results.not_run and not alone:
        return []
    blocks: list[Block] = [Heading(2, "Memory: cells not run, rounds run alone")]
    if results.not_run:
        rows = [
            [
                results.short(r["label"]),
                *([context_name(results, record_context(r))] if several else []),
                str(r["batch_size"]),
                size(r.get("engine_bytes")),
                size(r.get("available_bytes")),
                r.get("reason", ""),
            ]
            for r in results.not_run
        ]
        source = "`skipped` records: `engine_bytes` (its KV caches once written), `available_bytes` (free before the rounds), `reason`"
        headers = ["Method", *(["Context"] if several else []), "Batch", "Engine needs", "Free", "Why"]
        blocks.append(Table(headers, rows, source + (", `context`" if several else "")))
    if alone:
        if several:
            sizes = ", ".join(f"{b} ({context_name(results, ctx)})" for b, ctx in alone)
        else:
            sizes = ", ".join(str(b) for b, _ in alone)
        blocks.append(
            Paragraph(
                f"At batch {sizes} the methods' engines did not fit in memory together, so every round ran each alone, one after "
                "another (`cell.memory.rounds`), and the machine's drift between them is not taken out as turns take it out."
            )
        )
    return blocks
