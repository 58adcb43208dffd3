"""A launched engine's draft length per batch size, chosen from measured cells, and the check of that choice.

Each candidate draft length k (0: plain decoding) was measured at each batch size as passes of output tok/s (a
cell's ``tok_s_repeats``). A cell's figure is its passes' median, with the median's standard error from their median
absolute deviation: on a small shared machine a pass is now and then much slower (another process took a core; the
opposite never happens), and a mean and standard deviation would follow that pass. The choice is the in-process
tuner's rule (``cost_model.CostModel.best``): at each batch size, the smallest k within one standard error of the
difference below the best, so what the measurement cannot tell apart goes to the shorter draft; plain decoding is a
candidate for the whole server, not for one batch size of a schedule (``choose_schedule``). The check is the engine relaunched with the schedule, measured at every batch size: its tok/s against what
the choice predicted (the chosen k's), against plain decoding's and against the best fixed k's.

Knows: ``Measured`` figures and the rule. Does not know: how the cells were measured, or any engine's flags.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """One (draft length, batch size) cell: each pass's output tok/s."""

    k: int  # draft tokens a step (0: plain decoding); a check cell carries the k chosen at its batch size
    batch_size: int
    passes: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.passes)

    @property
    def se(self) -> float:
        """The median's standard error, 1.2533 * 1.4826 * MAD / sqrt(n) (for normal passes, as sd / sqrt(n) is the
        mean's), which one outlying pass barely moves."""
        if len(self.passes) < 2:
            return 0.0
        mad = statistics.median(abs(x - self.median) for x in self.passes)
        return 1.2533 * 1.4826 * mad / math.sqrt(len(self.passes))

    def below(self, other: Measured) -> float:
        """How far this cell falls below ``other``, in standard errors of the difference (0 when level)."""
        gap = other.median - self.median
        spread = math.hypot(self.se, other.se)
        return gap / spread if spread else (math.inf if gap > 0 else 0.0)

    def summary(self) -> dict:
        return {
            "k": self.k,
            "tok_s": self.median,
            "se": self.se,
            "min": min(self.passes),
            "max": max(self.passes),
            "passes": len(self.passes),
        }


def choose(measured: list[Measured]) -> dict[int, int]:
    """{batch size: the smallest k within one standard error of the best there}."""
    chosen = {}
    for b in sorted({m.batch_size for m in measured}):
        cells = [m for m in measured if m.batch_size == b]
        best = max(cells, key=lambda m: m.median)
        chosen[b] = min(m.k for m in cells if m.below(best) <= 1.0)
    return chosen


def choose_schedule(measured: list[Measured]) -> dict[int, int]:
    """vLLM's draft length per batch size: plain decoding everywhere (all 0: no speculative config at all) when
    ``choose`` picks it at every batch size, else ``choose`` among k >= 1. Inside a speculative config vLLM's k = 0
    is not plain decoding: the speculative step's other costs stay, and a schedule at k = 0 ran 19-29% below plain
    decoding at batch 4-16 on vLLM-CPU (BENCHMARKS.md, "`speculab tune --engine vllm`"), below its own k = 1."""
    chosen = choose(measured)
    return choose([m for m in measured if m.k > 0]) if any(chosen.values()) else chosen


def check(measured: list[Measured], checked: list[Measured], chosen: dict[int, int]) -> dict[int, dict]:
    """Per batch size: the schedule's measured tok/s beside the prediction (the chosen k's cell), plain decoding and
    the best fixed k; ``error`` = checked / predicted - 1; the ``*_se_below`` fields say how many standard errors of
    the difference the schedule falls below plain decoding and below the best fixed k (at most 1: within the spread)."""
    out = {}
    for c in checked:
        cells = {m.k: m for m in measured if m.batch_size == c.batch_size}
        best = max(cells.values(), key=lambda m: m.median)
        predicted, plain = cells[chosen[c.batch_size]], cells[0]
        out[c.batch_size] = {
            "chosen_k": chosen[c.batch_size],
            "checked": c.summary(),
            "predicted": predicted.summary(),
            "plain": plain.summary(),
            "best_fixed": best.summary(),
            "error": c.median / predicted.median - 1 if predicted.median else None,
            "vs_plain": c.median / plain.median if plain.median else None,
            "vs_best_fixed": c.median / best.median if best.median else None,
            "plain_se_below": c.below(plain),
            "best_se_below": c.below(best),
        }
    return out
