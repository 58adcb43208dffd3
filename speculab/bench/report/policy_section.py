"""The report's section on speculation policies: each policy's draft budget at each batch size.

Knows: the cells' ``policy`` records (a named policy's rules, a policy file's, or the ones ``--policy auto`` found);
with several contexts, a row a context, its budgets at the context's median prompt length. Does not know: how a
policy was chosen (``speculab tune``).
"""

from __future__ import annotations

from speculab.bench.report.blocks import Block, Heading, Paragraph, Table
from speculab.bench.report.numbers import DASH, context_name
from speculab.bench.report.results import Results
from speculab.policy.table import Load, SpeculationPolicy


def _budget(policy: dict, batch_size: int, context_len: int) -> str:
    budget = SpeculationPolicy.from_dict(policy).draft_budget(Load(batch_size, context_len))
    return "no budget" if budget is None else "plain" if budget == 0 else str(budget)


def policy_blocks(results: Results) -> list[Block]:
    policies = {lab: c["policy"] for (lab, _, _), c in results.all_cells.items() if c.get("policy")}
    if not policies:
        return []
    several = results.several_contexts
    sizes = results.all_batch_sizes
    rows = []
    for label, policy in policies.items():
        for view in results.views if several else [results]:
            tokens = view.context_tokens(view.context) or 0
            x = [f"{view.speedup(label, b):.2f}x" if view.speedup(label, b) else DASH for b in sizes]
            where = [context_name(results, view.context)] if several else []
            budgets = [f"{_budget(policy, b, tokens)} ({s})" for b, s in zip(sizes, x)]
            rows.append([results.short(label), *where, *budgets, str(policy.get("min_acceptance", 0.0))])
    source = "`cell.policy.draft_budget` (the most draft nodes a request may have at that batch size; plain: none) and, in brackets, the speedup over the baseline; `cell.policy.min_acceptance`"
    if several:
        source += "; at each context, the budget at its median prompt length (`cell.context_tokens`)"
    return [
        Heading(2, "Speculation policies"),
        Paragraph(
            "Each method's draft budget at each batch size under its speculation policy: a named one, a file's, or with `policy=auto` the one `speculab tune` chose for this machine."
        ),
        Table(["Method", *(["Context"] if several else []), *(f"batch {b}" for b in sizes), "Acceptance floor"], rows, source),
    ]
