"""The report's section on cells the machine's memory could not hold: each with its reason and bytes.

Knows: the ``skipped`` records ``speculab bench`` writes in their place (``bench/memory_fit.py``), and the cells
measured with one engine alive at a time. Does not know: how the fit was decided.
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.numbers import size
from speculab.bench.report.results import Results


def not_run_blocks(results: Results) -> list[Block]:
    alone = sorted({b for (_, b), c in results.cells.items() if (c.get("memory") or {}).get("rounds", "in turns") != "in turns"})
    if not results.not_run and not alone:
        return []
    blocks: list[Block] = [Heading(2, "Memory: cells not run, rounds run alone")]
    if results.not_run:
        rows = [
            [
                results.short(r["label"]),
                str(r["batch_size"]),
                size(r.get("engine_bytes")),
                size(r.get("available_bytes")),
                r.get("reason", ""),
            ]
            for r in results.not_run
        ]
        source = "`skipped` records: `engine_bytes` (its KV caches once written), `available_bytes` (free before the rounds), `reason`"
        blocks.append(Table(["Method", "Batch", "Engine needs", "Free", "Why"], rows, source))
    if alone:
        sizes = ", ".join(map(str, alone))
        blocks.append(
            Paragraph(
                f"At batch {sizes} the methods' engines did not fit in memory together, so every round ran each alone, one after "
                "another (`cell.memory.rounds`), and the machine's drift between them is not taken out as turns take it out."
            )
        )
    return blocks
