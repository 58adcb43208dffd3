"""Which acceptance figures the report plots by language: the untimed pass's, else the timed cells'.

Knows: the ``acceptance`` records (each speculative method over the first prompts of every domain, with the prompts
each figure counts) and, for a run without them, each label's cell at its smallest batch size, whose prompt counts
per domain were not recorded. Does not know: plotting (``plots.py``) or tables (``acceptance_section.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from speculab.bench.report.results import DOMAIN_ORDER, Results, acceptance_cell, domains_of

PASS, CELLS = "pass", "cells"
ALL = "all"


@dataclass(frozen=True)
class AcceptanceBars:
    source: str  # PASS: the untimed acceptance pass; CELLS: each label's timed cell at its smallest batch size
    groups: list[str]  # the domains, then ALL
    prompts: dict[str, tuple[int, int]]  # group -> fewest and most prompts behind a label's figure (PASS only)
    rates: dict[str, list[float | None]]  # label -> acceptance rate per group
    batches: list[int]  # CELLS: the batch sizes of the cells shown

    def tick(self, group: str) -> str:
        """``python`` over ``(n=12)``: the group and the prompts its figures count."""
        if group not in self.prompts:
            return group
        low, high = self.prompts[group]
        return f"{group}\n(n={low})" if low == high else f"{group}\n(n={low}–{high})"

    @property
    def title(self) -> str:
        if self.source == PASS:
            return "Acceptance rate by language (untimed acceptance pass)"
        return "Acceptance rate by language (no acceptance pass: timed cells)"

    @property
    def subtitle(self) -> str:
        if self.source == PASS:
            return "drafting as at batch 1; accepted draft tokens / drafted depth; n = prompts per figure"
        at = "/".join(map(str, self.batches))
        return f"each method's cell at batch {at}; accepted draft tokens / drafted depth; prompts per domain not recorded"


def pass_domains(results: Results) -> list[str]:
    found = {d for record in results.acceptance.values() for d in record.get("by_domain", {})}
    return [d for d in DOMAIN_ORDER if d in found] + sorted(found - set(DOMAIN_ORDER))


def _from_pass(results: Results) -> AcceptanceBars:
    labels = [lab for lab in results.all_labels if lab in results.acceptance]
    groups = [*pass_domains(results), ALL]
    figures = {
        lab: [results.acceptance[lab].get("by_domain", {}).get(g) for g in groups[:-1]] + [results.acceptance[lab].get(ALL)]
        for lab in labels
    }
    prompts = {}
    for i, g in enumerate(groups):
        counts = [f[i]["prompts"] for f in figures.values() if f[i] and f[i].get("prompts") is not None]
        if counts:
            prompts[g] = (min(counts), max(counts))
    rates = {lab: [f.get("acceptance_rate") if f else None for f in figs] for lab, figs in figures.items()}
    return AcceptanceBars(PASS, groups, prompts, rates, [])


def acceptance_bars(results: Results) -> AcceptanceBars | None:
    """The pass's figures where the run has them, else the timed cells'; None without a speculative label."""
    if results.acceptance:
        return _from_pass(results)
    spec = [lab for lab in results.labels if not results.is_baseline(lab)]
    if not spec:
        return None
    domains = domains_of(results, "acceptance_by_domain")
    cells = {lab: acceptance_cell(results, lab) for lab in spec}
    rates = {lab: [(c.get("acceptance_by_domain") or {}).get(d) for d in domains] + [c.get("acceptance_rate")] for lab, c in cells.items()}
    batches = sorted({c["batch_size"] for c in cells.values() if "batch_size" in c})
    return AcceptanceBars(CELLS, [*domains, ALL], {}, rates, batches)
