"""A cost model of speculation from measured steps, and the policy that maximises its predicted tok/s.

For batch size B and a cap of c draft nodes a request: a step costs ``step_ms(B, c)`` (drafting
``propose_ms(B, c)`` of it, the target's verify over c + 1 tokens a row and the bookkeeping the rest) and gives
each request ``tau`` tokens (accepted + the bonus or recovered token). Acceptance depends on what is decoded and
drafted, not on the batch size (greedy output is the same at every batch size), so ``tau`` pools the steps of every
cell that drafted as much: a cell's *nodes*, the most draft nodes a request had in it (an EAGLE tree under a batch
budget drafts fewer nodes than its cap at larger batch sizes; a chain drafts its cap).
Predicted tok/s = B * tau(c) / step_ms(B, c) (means, as a run's tokens over its time), with its standard error from
the spread of the steps' times and tokens. The policy caps each batch size at the smallest c whose prediction is
within one standard error (of the difference) of the best one: what the measurement cannot tell apart goes to the
cheaper draft, 0 (plain decoding) included.

Knows: ``sweep.Step`` records and ``SpeculationPolicy``. Does not know: how the steps were run.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from speculab.speculative.policy import SpeculationPolicy
from speculab.tune.sweep import Step


@dataclass(frozen=True)
class Cell:
    """One (batch size, cap): its steps' mean, median and range in ms, and the predicted tok/s."""

    batch_size: int
    cap: int
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
    """Each (batch size, cap) cell's most draft nodes a request had."""
    nodes: dict[tuple[int, int], int] = defaultdict(int)
    for s in steps:
        nodes[(s.batch_size, s.cap)] = max(nodes[(s.batch_size, s.cap)], max(s.drafted, default=0))
    return nodes


def tokens_per_step(steps: list[Step], nodes: dict[tuple[int, int], int]) -> dict:
    """By a cell's draft nodes: tau, overall and by domain, and the share of request-steps that took more than d
    tokens (accepted d drafts)."""
    emitted, by_domain = defaultdict(list), defaultdict(lambda: defaultdict(list))
    for s in steps:
        key = nodes[(s.batch_size, s.cap)]
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


@dataclass(frozen=True)
class CostModel:
    cells: tuple[Cell, ...]
    acceptance: dict  # tokens_per_step(...), keyed by draft nodes

    @classmethod
    def from_steps(cls, steps: list[Step]) -> CostModel:
        nodes = nodes_of(steps)
        acceptance = tokens_per_step(steps, nodes)
        grouped = defaultdict(list)
        for s in steps:
            grouped[(s.batch_size, s.cap)].append(s)
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
        """The smallest cap whose predicted tok/s the measurement cannot tell from the most at this batch size
        (less than one standard error of the difference below it)."""
        cells = [c for c in self.cells if c.batch_size == batch_size]
        top = max(cells, key=lambda c: c.predicted_tok_s)
        close = [c for c in cells if top.predicted_tok_s - c.predicted_tok_s <= math.hypot(top.predicted_se, c.predicted_se)]
        return min(close, key=lambda c: c.cap)

    def cell(self, batch_size: int, cap: int) -> Cell:
        return next(c for c in self.cells if (c.batch_size, c.cap) == (batch_size, cap))

    def policy(self) -> SpeculationPolicy:
        """Each measured batch size's best cap, from that batch size up to the next measured one."""
        table, last = [], None
        for b in self.batch_sizes():
            cap = self.best(b).cap
            if cap != last:
                table.append((b, cap))
                last = cap
        return SpeculationPolicy(tuple(table))

    def to_dict(self) -> dict:
        keyed = {k: {str(c): v for c, v in self.acceptance[k].items()} for k in self.acceptance}
        return {"cells": [asdict(c) for c in self.cells], "acceptance": keyed}
