"""The report's section on speculation policies: each policy's draft budget at each batch size.

Knows: the cells' ``policy`` records (a named policy's rules, a policy file's, or the ones ``--policy auto`` found).
Does not know: how a policy was chosen (``speculab tune``).
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.numbers import DASH
from speculab.bench.report.results import Results
from speculab.policy.table import Load, SpeculationPolicy


def _budget(policy: dict, batch_size: int) -> str:
    budget = SpeculationPolicy.from_dict(policy).draft_budget(Load(batch_size))
    return "no budget" if budget is None else "plain" if budget == 0 else str(budget)


def policy_blocks(results: Results) -> list[Block]:
    policies = {lab: c["policy"] for (lab, _), c in results.cells.items() if c.get("policy")}
    if not policies:
        return []
    sizes = results.batch_sizes
    rows = []
    for label, policy in policies.items():
        x = [f"{results.speedup(label, b):.2f}x" if results.speedup(label, b) else DASH for b in sizes]
        rows.append(
            [results.short(label), *(f"{_budget(policy, b)} ({s})" for b, s in zip(sizes, x)), str(policy.get("min_acceptance", 0.0))]
        )
    source = "`cell.policy.draft_budget` (the most draft nodes a request may have at that batch size; plain: none) and, in brackets, the speedup over the baseline; `cell.policy.min_acceptance`"
    return [
        Heading(2, "Speculation policies"),
        Paragraph(
            "Each method's draft budget at each batch size under its speculation policy: a named one, a file's, or with `policy=auto` the one `speculab tune` chose for this machine."
        ),
        Table(["Method", *(f"batch {b}" for b in sizes), "Acceptance floor"], rows, source),
    ]
