"""The report's section on cells the machine's memory could not hold: each with its reason and bytes, and its context
where the run has several.

Knows: the ``skipped`` records ``speculab bench`` writes in their place (``bench/memory_fit.py``), the cells measured
with one engine alive at a time, and those whose later rounds ran in groups beside the baseline (``cell.memory.rounds``
begins "in groups", ``cell.memory.groups`` names each group's labels). Does not know: how the fit was decided.
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.numbers import context_name, size
from speculab.bench.report.results import Results, record_context

IN_GROUPS = "in groups"  # how ``memory_fit.RoundsFit.rounds_text`` begins for rounds run in groups


def not_run_blocks(results: Results) -> list[Block]:
    several = results.several_contexts
    # (batch, context) -> the memory record of a cell there whose rounds did not all run in turns
    rounds = {
        (b, ctx): m for (_, b, ctx), c in results.all_cells.items() if (m := c.get("memory") or {}).get("rounds", "in turns") != "in turns"
    }
    alone = sorted((k for k, m in rounds.items() if not _grouped(m)), key=lambda k: (results.contexts.index(k[1]), k[0]))
    grouped = sorted((k for k, m in rounds.items() if _grouped(m)), key=lambda k: (results.contexts.index(k[1]), k[0]))
    if not results.not_run and not alone and not grouped:
        return []
    blocks: list[Block] = [Heading(2, "Memory: cells not run, rounds run alone" + (" or in groups" if grouped else ""))]
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
        blocks.append(
            Paragraph(
                f"At batch {_sizes(results, alone)} the methods' engines did not fit in memory together, so every round ran each "
                "alone, one after another (`cell.memory.rounds`), and the machine's drift between them is not taken out as turns "
                "take it out."
            )
        )
    by_groups: dict[str, list] = {}  # the groups' names -> the (batch, context)s whose rounds ran in them
    for key in grouped:
        named = ", ".join("+".join(results.short(label) for label in g) for g in rounds[key].get("groups") or [])
        by_groups.setdefault(named, []).append(key)
    blocks += [_groups_paragraph(_sizes(results, keys), named) for named, keys in by_groups.items()]
    return blocks


def _grouped(memory: dict) -> bool:
    return str(memory.get("rounds", "")).startswith(IN_GROUPS)


def _sizes(results: Results, keys: list) -> str:
    """The batch sizes of ``keys`` ((batch, context) pairs), each with its context where the run has several."""
    if results.several_contexts:
        return ", ".join(f"{b} ({context_name(results, ctx)})" for b, ctx in keys)
    return ", ".join(str(b) for b, _ in keys)


def _groups_paragraph(sizes: str, named: str) -> Paragraph:
    return Paragraph(
        f"At batch {sizes} the methods' engines did not fit in memory together but each fit beside the baseline's, so the "
        "later rounds ran in groups, one after another, each the baseline and the methods that fit beside it taking turns"
        f"{': ' + named if named else ''} (`cell.memory.rounds`). A method's speedup is over the baseline's run in its own "
        "group (`cell.baseline_tok_s_by_round`): the drift between a method and its baseline is taken out as in turns, not "
        "the drift between groups."
    )
