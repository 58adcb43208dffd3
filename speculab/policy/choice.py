"""The choosing rule: at one load, the smallest draft budget the measurement cannot tell from the best.

Every tuner chooses with it: the in-process cost model (predicted tok/s of each budget, ``tune/cost_model.py``) and the
tune of a launched engine (measured passes of each vLLM k, ``tune/engine_choice.py``). A candidate less than one
standard error of the difference below the best is as good as the best, and the smallest such budget wins: what the
measurement cannot tell apart goes to the cheaper draft, 0 (plain decoding) included.

Knows: estimates and their standard errors. Does not know: how they were measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """One candidate budget's estimated tok/s at one load, and that estimate's standard error."""

    draft_nodes: int
    tok_s: float
    se: float

    def below(self, other: Estimate) -> float:
        """How far this estimate falls below ``other``, in standard errors of the difference (0 when level)."""
        gap = other.tok_s - self.tok_s
        spread = math.hypot(self.se, other.se)
        return gap / spread if spread else (math.inf if gap > 0 else 0.0)


def choose_budget(candidates: Iterable[Estimate]) -> Estimate:
    """The smallest budget less than one standard error of the difference below the best estimate."""
    candidates = list(candidates)
    if not candidates:
        raise ValueError("no candidates to choose a draft budget from")
    best = max(candidates, key=lambda e: e.tok_s)
    return min((e for e in candidates if e.below(best) <= 1.0), key=lambda e: e.draft_nodes)
