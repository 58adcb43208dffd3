"""The report's headline acceptance table: each method by language over the untimed pass's prompts, counts shown.

Knows: the ``acceptance`` records (``bench/acceptance_pass.py``): per method and domain the prompts, acceptance rate
and τ of a greedy run drafting as at batch size 1, also plotted (``plots.py``). Does not know: how they were measured, or the timed cells' own
acceptance (``sections.py`` shows that beside the speeds).
"""

from __future__ import annotations

from speculab.bench.report.acceptance_data import pass_domains
from speculab.bench.report.blocks import Block, Heading, Image, Paragraph, Table
from speculab.bench.report.numbers import DASH, num, pct
from speculab.bench.report.plots import PLOT_FILES
from speculab.bench.report.results import Results


def _figure(figures: dict | None, key: str, fmt) -> str:
    if not figures or figures.get(key) is None:
        return DASH
    return f"{fmt(figures[key])} ({figures.get('prompts', 0)})"


def acceptance_pass_blocks(results: Results) -> list[Block]:
    if not results.acceptance:
        return []
    domains = pass_domains(results)
    blocks: list[Block] = [Heading(2, "Acceptance by language")]
    for key, fmt, title in (("acceptance_rate", pct, "Acceptance rate"), ("tau", lambda v: num(v, 2), "Mean τ")):
        rows = [
            [results.short(label), *(_figure(r["by_domain"].get(d), key, fmt) for d in domains), _figure(r.get("all"), key, fmt)]
            for label, r in results.acceptance.items()
        ]
        source = f"`acceptance.by_domain[domain].{key}` and, in brackets, `.prompts`; `acceptance.all`"
        blocks.append(Table([f"{title}: method", *domains, "all"], rows, source))
    some = next(iter(results.acceptance.values()))
    blocks.append(
        Paragraph(
            f"An untimed greedy pass after the timed cells: each method over the first prompts of every domain "
            f"({some.get('max_tokens', DASH)} tokens each, {some.get('batch_size', DASH)} at a time), drafting as at batch "
            "size 1 (its speculation policy, whose draft budgets only shrink larger batches, left out: `acceptance.drafted_as`). "
            "In fp32 a request's tokens, and so its drafts, do not depend on its batch."
        )
    )
    return [*blocks, Image(PLOT_FILES["acceptance"], "Acceptance rate by language (untimed pass)")]
