"""The report's section on speculation policies: what each policy-capped method drafted at each batch size.

Knows: the cells' ``policy`` records (a policy file's table, or the one ``--policy auto`` found). Does not know: how
a policy was chosen (``speculab tune``).
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.numbers import DASH
from speculab.bench.report.results import Results
from speculab.speculative.policy import SpeculationPolicy


def _cap(policy: dict, batch_size: int) -> str:
    cap = SpeculationPolicy.from_dict(policy).batch_cap(batch_size)
    return "no cap" if cap is None else "plain" if cap == 0 else str(cap)


def policy_blocks(results: Results) -> list[Block]:
    policies = {lab: c["policy"] for (lab, _), c in results.cells.items() if c.get("policy")}
    if not policies:
        return []
    sizes = results.batch_sizes
    rows = []
    for label, policy in policies.items():
        x = [f"{results.speedup(label, b):.2f}x" if results.speedup(label, b) else DASH for b in sizes]
        rows.append([results.short(label), *(f"{_cap(policy, b)} ({s})" for b, s in zip(sizes, x)), str(policy.get("min_acceptance", 0.0))])
    source = "`cell.policy.by_batch_size` (the most draft nodes a request had at that batch size; plain: none) and, in brackets, the speedup over the baseline; `cell.policy.min_acceptance`"
    return [
        Heading(2, "Speculation policies"),
        Paragraph(
            "Each policy-capped method's draft cap at each batch size: a policy file's, or with `policy=auto` the one `speculab tune` chose for this machine."
        ),
        Table(["Method", *(f"batch {b}" for b in sizes), "Acceptance floor"], rows, source),
    ]
