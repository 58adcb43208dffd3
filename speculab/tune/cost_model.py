"""A cost model of speculation from measured steps, and the policy that maximises its predicted tok/s.

For batch size B and a draft budget of c nodes a request: a step costs ``step_ms(B, c)`` (drafting
``propose_ms(B, c)`` of it, the target's verify over c + 1 tokens a row and the bookkeeping the rest) and gives
each request ``tau`` tokens (accepted + the bonus or recovered token). Acceptance depends on what is decoded and
drafted, not on the batch size (greedy output is the same at every batch size), so ``tau`` pools the steps of every
cell that drafted as much: a cell's *nodes*, the most draft nodes a request had in it (an EAGLE tree may draft fewer
nodes than its budget; a chain drafts its budget).
Predicted tok/s = B * tau(c) / step_ms(B, c) (means, as a run's tokens over its time), with its standard error from
the spread of the steps' times and tokens. The policy gives each batch size the budget the one choosing rule picks
(``policy.choice.choose_budget``): the smallest whose prediction the measurement cannot tell from the best one.

A chain drafter whose budgeted draft is its unbudgeted draft's prefix (n-gram, suffix decoding, a draft model) is
modelled from every step instead: tau(c) from each request-step truncated to c (``truncated``), and the step time from
a fit of time on draft nodes at the nodes c would have drafted. Adaptive drafters (suffix decoding drafts long only where its
match is long) made the cell-by-cell model wrong by 35-49%: a cell's few blocks of steps fall on stretches of very
different acceptance.

Knows: ``sweep.Step`` records. Does not know: how the steps were run.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from speculab.policy.choice import Estimate, choose_budget
from speculab.policy.table import SpeculationPolicy
from speculab.tune.sweep import Step


@dataclass(frozen=True)
class Cell:
    """One (batch size, draft budget): its steps' mean, median and range in ms, and the predicted tok/s."""

    batch_size: int
    budget: int
    nodes: int  # the most draft nodes a request had in this cell's steps
    steps: int
    step_ms: float
    step_ms_median: float
    step_ms_min: float
    step_ms_max: float
    propose_ms: float
    tau: float
    predicted_tok_s: float
    predicted_se: float  # its standard error, from the steps' times and the pooled tokens a step


def standard_error(values: list[float]) -> float:
    n = len(values)
    return statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def nodes_of(steps: list[Step]) -> dict[tuple[int, int], int]:
    """Each (batch size, budget) cell's most draft nodes a request had."""
    nodes: dict[tuple[int, int], int] = defaultdict(int)
    for s in steps:
        nodes[(s.batch_size, s.budget)] = max(nodes[(s.batch_size, s.budget)], max(s.drafted, default=0))
    return nodes


def tokens_per_step(steps: list[Step], nodes: dict[tuple[int, int], int]) -> dict:
    """By a cell's draft nodes: tau, overall and by domain, and the share of request-steps that took more than d
    tokens (accepted d drafts)."""
    emitted, by_domain = defaultdict(list), defaultdict(lambda: defaultdict(list))
    for s in steps:
        key = nodes[(s.batch_size, s.budget)]
        emitted[key].extend(s.emitted)
        for n, domain in zip(s.emitted, s.domains):
            by_domain[key][domain].append(n)
    return {
        "tau": {c: mean(v) for c, v in sorted(emitted.items())},
        "tau_by_domain": {c: {d: mean(v) for d, v in sorted(ds.items())} for c, ds in sorted(by_domain.items())},
        "accepted_at_depth": {c: [mean(n > d for n in v) for d in range(1, c + 1)] for c, v in sorted(emitted.items())},
        "tau_se": {c: standard_error(v) for c, v in sorted(emitted.items())},
        "request_steps": {c: len(v) for c, v in sorted(emitted.items())},
    }


def truncated(steps: list[Step], budget: int) -> list[tuple[int, int, str]]:
    """A chain drafter's request-steps as a budget of ``budget`` would have had them: (tokens taken, draft nodes,
    domain), from every step whose budget was ``budget`` or more (a budgeted chain is the unbudgeted one's first
    ``budget`` tokens, so 1 + min(accepted, budget) tokens and min(nodes, budget) nodes)."""
    return [
        (1 + min(e - 1, budget), min(d, budget), domain)
        for s in steps
        if s.budget is not None and s.budget >= budget
        for e, d, domain in zip(s.emitted, s.drafted, s.domains)
    ]


def chain_tokens_per_step(steps: list[Step], budgets: list[int]) -> dict:
    """tokens_per_step's figures for a chain drafter, by budget, each from the steps truncated to it."""
    rows = {c: truncated(steps, c) for c in budgets}
    emitted = {c: [e for e, _, _ in r] for c, r in rows.items()}
    by_domain = {c: defaultdict(list) for c in budgets}
    for c, r in rows.items():
        for e, _, domain in r:
            by_domain[c][domain].append(e)
    return {
        "tau": {c: mean(v) for c, v in emitted.items()},
        "tau_by_domain": {c: {d: mean(v) for d, v in sorted(ds.items())} for c, ds in by_domain.items()},
        "accepted_at_depth": {c: [mean(n > d for n in v) for d in range(1, c + 1)] for c, v in emitted.items()},
        "tau_se": {c: standard_error(v) for c, v in emitted.items()},
        "request_steps": {c: len(v) for c, v in emitted.items()},
        "nodes": {c: mean(d for _, d, _ in r) for c, r in rows.items()},
    }


def step_time_fit(steps: list[Step]) -> tuple[float, float, float, float, float]:
    """Least squares of a step's ms on its draft nodes (all rows): (intercept, slope, residual sd, mean x, Sxx)."""
    xs, ys = [float(sum(s.drafted)) for s in steps], [s.seconds * 1e3 for s in steps]
    mx, my = mean(xs), mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    intercept = my - slope * mx
    residuals = [y - intercept - slope * x for x, y in zip(xs, ys)]
    sd = math.sqrt(sum(r * r for r in residuals) / (len(xs) - 2)) if len(xs) > 2 else 0.0
    return intercept, slope, sd, mx, sxx


def chain_cells(steps: list[Step], acceptance: dict) -> list[Cell]:
    """A chain drafter's cells: tau and nodes from the truncated steps; the step time from each batch size's fit of
    time on nodes (drafting included), at the nodes the budget would have drafted. Every step informs every budget."""
    cells = []
    for b in sorted({s.batch_size for s in steps}):
        at_b = [s for s in steps if s.batch_size == b and s.budget is not None]
        a, slope, sd, mx, sxx = step_time_fit(at_b)
        for c in sorted({s.budget for s in at_b}):
            own = [s.seconds * 1e3 for s in at_b if s.budget == c]
            x = b * acceptance["nodes"][c]
            ms, tau = a + slope * x, acceptance["tau"][c]
            ms_se = sd * math.sqrt(1 / len(at_b) + ((x - mx) ** 2 / sxx if sxx else 0.0))
            predicted = b * tau / ms * 1e3
            se = predicted * math.hypot(ms_se / ms, acceptance["tau_se"][c] / tau)
            propose = mean(s.propose_seconds * 1e3 for s in at_b if s.budget == c)
            cells.append(Cell(b, c, c, len(own), ms, statistics.median(own), min(own), max(own), propose, tau, predicted, se))
    return cells


@dataclass(frozen=True)
class CostModel:
    cells: tuple[Cell, ...]
    acceptance: dict  # tokens_per_step(...), keyed by draft nodes (by budget for a chain drafter)

    @classmethod
    def from_steps(cls, steps: list[Step], chains: bool = False) -> CostModel:
        """``chains``: the drafter drafts chains whose budgeted draft is the unbudgeted one's prefix (n-gram, suffix, a
        draft model), which lets every step inform every budget (``chain_cells``)."""
        if chains:
            acceptance = chain_tokens_per_step(steps, sorted({s.budget for s in steps if s.budget is not None}))
            return cls(tuple(chain_cells(steps, acceptance)), acceptance)
        nodes = nodes_of(steps)
        acceptance = tokens_per_step(steps, nodes)
        grouped = defaultdict(list)
        for s in steps:
            grouped[(s.batch_size, s.budget)].append(s)
        cells = []
        for (b, c), group in sorted(grouped.items()):
            ms = [s.seconds * 1e3 for s in group]
            n = nodes[(b, c)]
            tau, tau_se, propose_ms = acceptance["tau"][n], acceptance["tau_se"][n], mean(s.propose_seconds * 1e3 for s in group)
            predicted = b * tau / mean(ms) * 1e3
            se = predicted * math.hypot(standard_error(ms) / mean(ms), tau_se / tau)
            cells.append(Cell(b, c, n, len(group), mean(ms), statistics.median(ms), min(ms), max(ms), propose_ms, tau, predicted, se))
        return cls(tuple(cells), acceptance)

    def batch_sizes(self) -> list[int]:
        return sorted({c.batch_size for c in self.cells})

    def best(self, batch_size: int) -> Cell:
        """The budget the choosing rule picks at this batch size, from the predicted tok/s of each."""
        cells = {c.budget: c for c in self.cells if c.batch_size == batch_size}
        return cells[choose_budget(Estimate(c.budget, c.predicted_tok_s, c.predicted_se) for c in cells.values()).draft_nodes]

    def cell(self, batch_size: int, budget: int) -> Cell:
        return next(c for c in self.cells if (c.batch_size, c.budget) == (batch_size, budget))

    def policy(self) -> SpeculationPolicy:
        """Each measured batch size's best budget, from that batch size up to the next measured one."""
        return SpeculationPolicy.by_batch_size({b: self.best(b).budget for b in self.batch_sizes()})

    def to_dict(self) -> dict:
        keyed = {k: {str(c): v for c, v in self.acceptance[k].items()} for k in self.acceptance}
        return {"cells": [asdict(c) for c in self.cells], "acceptance": keyed}
