"""A method's speedup over its baseline at one batch size, and the sentence that says how the report's were measured.

Knows: two ways a run times its cells. In rounds (``run.config.timing == "rounds"``): at one batch size the baseline
and the methods take turns, round after round, and each cell keeps ``tok_s_by_round`` (tok/s per round, in round
order; round i of every method ran in the same round); a speedup is then the median of the per-round ratios, with
their lowest and highest. Where memory held not every engine at once, the later rounds ran in groups, each the
baseline and the methods beside it, and a method's cell keeps its own group's baseline run in
``baseline_tok_s_by_round``: its ratios are to that (older results have no such field, and read as before). Cells
timed separately (older results): the ratio of the two cells' ``tok_s`` (each a median over its own repeats), with the
method's slowest and fastest repeat (``tok_s_repeats``) over the baseline's median. Rounds after the first may take
turns within the round (``cell.turn_s``, ``bench/turns.py``). Does not know: which cell is whose baseline
(``results.py``), or how a speedup is written (``numbers.py``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Speedup:
    value: float
    low: float | None  # the lowest per-round ratio, or the slowest repeat over the baseline's median; None: one figure
    high: float | None
    rounds: int  # the paired rounds the value is the median of; 0: a ratio of medians from separate cells
    turn_s: float | None = None  # the rounds after the first took turns of this many seconds (in_process.TURN_S)
    in_groups: bool = False  # paired with the baseline's runs in the method's own group (``baseline_tok_s_by_round``)


def speedup(cell: dict[str, Any] | None, baseline: dict[str, Any] | None) -> Speedup | None:
    """``cell`` over ``baseline`` (both cell records at one batch size): paired by round where the cell's
    ``tok_s_by_round`` and the baseline's rounds (the cell's ``baseline_tok_s_by_round`` where it has them, else the
    baseline cell's ``tok_s_by_round``) are of one length, else the ratio of their ``tok_s``; None without both figures."""
    if not cell or not baseline:
        return None
    grouped = cell.get("baseline_tok_s_by_round") or []
    mine, ref = cell.get("tok_s_by_round") or [], grouped or baseline.get("tok_s_by_round") or []
    if mine and len(mine) == len(ref) and all(m is not None for m in mine) and all(ref):
        ratios = [m / r for m, r in zip(mine, ref)]
        spread = (min(ratios), max(ratios)) if len(ratios) > 1 else (None, None)
        return Speedup(statistics.median(ratios), *spread, len(ratios), cell.get("turn_s"), bool(grouped))
    tok, base = cell.get("tok_s"), baseline.get("tok_s")
    if tok is None or not base:
        return None
    repeats = cell.get("tok_s_repeats") or []
    spread = (min(repeats) / base, max(repeats) / base) if len(repeats) > 1 else (None, None)
    return Speedup(tok / base, *spread, 0)


@dataclass(frozen=True)
class Timing:
    """How a run's speedups were measured: the rounds behind the paired ones, and how many were not paired."""

    rounds: tuple[int, ...]  # the distinct numbers of rounds among the paired speedups
    paired: int  # speedups that are medians of per-round ratios
    separate: int  # speedups that are ratios of medians from separate cells
    turn_s: float | None = None  # the turns of the later rounds, where the paired cells took them
    in_groups: int = 0  # paired speedups whose later rounds ran in groups beside the baseline (memory)

    @property
    def text(self) -> str:
        n = str(self.rounds[0]) if len(self.rounds) == 1 else f"{self.rounds[0]}–{self.rounds[-1]}" if self.rounds else ""
        paired = (
            f"in {n} rounds at each batch size (the baseline and every method taking turns, round after round), a speedup "
            "being the median of a method's per-round ratios to the baseline's tok/s in the same round "
            "(`cell.tok_s_by_round`), in brackets the lowest and highest ratio"
        )
        if self.turn_s:
            paired += (
                f"; the first round runs each method alone (its peak memory), in the later ones the methods' engines take "
                f"turns of {self.turn_s:g} s of their own steps, each timed on its own clock (`cell.turn_s`)"
            )
        if self.in_groups:
            paired += (
                f"; for {self.in_groups} of them memory held not every engine at once, so the later rounds ran in groups, "
                "each the baseline and the methods that fit beside it taking turns, and a method's ratio is to the "
                "baseline's run in its own group (`cell.baseline_tok_s_by_round`)"
            )
        separate = (
            "as the ratio of medians from separate cells, a method's median tok/s over its baseline's (`cell.tok_s`) with "
            "the two cells timed at different times, in brackets the method's slowest and fastest repeat "
            "(`cell.tok_s_repeats`) over the baseline's median"
        )
        if not self.paired and not self.separate:
            return "No speedups: no method was measured beside a baseline at one batch size."
        if not self.separate:
            return f"How speedups were measured: {paired}."
        if not self.paired:
            return f"How speedups were measured: {separate}."
        total = self.paired + self.separate
        return f"How speedups were measured: {self.paired} of {total} {paired}; the other {self.separate} {separate}."


def timing(speedups: list[Speedup]) -> Timing:
    paired = [s.rounds for s in speedups if s.rounds]
    turns = sorted({s.turn_s for s in speedups if s.rounds and s.turn_s})
    grouped = sum(1 for s in speedups if s.rounds and s.in_groups)
    return Timing(tuple(sorted(set(paired))), len(paired), len(speedups) - len(paired), turns[0] if len(turns) == 1 else None, grouped)
