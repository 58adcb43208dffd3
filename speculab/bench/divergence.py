"""Where two greedy outputs part, and whether the target was nearly tied there.

Greedy outputs of two engines (or of one engine at two batch sizes) may part where the target's
two best tokens are within rounding of each other: a near-tie, not a bug. For each prompt whose
output differs from the reference, this finds the first token where they differ (both texts
tokenised by the target's tokenizer), runs the target on the chat prompt plus the shared tokens,
and reports the log-probability gap between the two tokens chosen there. In-process runs also
record, where each token was chosen, the gaps of the target's leading tokens below its top one
(``margins.py``); then the divergence is a near-tie when, in each run, the gap between its own choice
and the other run's choice is within ``near_tie_bound``, the spread rounding in the run's dtype allows.
Where the other run's choice was not among a run's recorded leaders (its gap is only bounded below) and
that bound is within rounding, the recomputed gap decides, as it does for runs that record nothing.

Knows: the loaded target (speculab's own model code, the run's dtype), its tokenizer, and how far rounding
in a dtype can move a logit.
Does not know: HTTP or how the outputs were produced.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from speculab.bench.agreement import first_difference
from speculab.bench.margins import LogitMargin
from speculab.models.llama import prefill

NEAR_TIE = 0.05  # nats: the bound's floor (fp32 runs; engines that differ in kernels, not in dtype)
# Between two runs in one dtype, a logit moves by at most this many unit roundoffs of the top logit: the largest
# measured, 8.0 (median 3.2), rounded up. bf16 on SmolLM2-135M, one-token against 49-token forwards, 147 positions,
# AMD EPYC AVX2 (benchmarks/bf16.py rounding; BENCHMARKS.md, "bf16: where greedy outputs part").
ROUNDING_SPREAD = 9


def near_tie_bound(dtype: torch.dtype, top_logit: float) -> float:
    """The largest top-1 minus top-2 logit gap at which two greedy runs in ``dtype`` can choose differently
    by rounding alone (nats; the same for log-probabilities).

    Where run A chose token a and run B token b, A has z_a >= z_b and B has z_b >= z_a. Each logit moves by
    at most ROUNDING_SPREAD * u * |top| between the runs (u = eps / 2, the unit roundoff: 2^-8 for bf16,
    2^-24 for fp32), so z_a - z_b moves by at most twice that, and each run's own gap is below it:
    18 u |top| in bf16 (2.1 at a top logit of 30), the 0.05 floor in fp32.
    """
    u = torch.finfo(dtype).eps / 2
    return max(NEAR_TIE, 2 * ROUNDING_SPREAD * u * abs(top_logit))


@dataclass(frozen=True)
class Divergence:
    prompt: int  # index in the cell's prompts
    token_index: int  # first output token that differs
    tokens: tuple[int, int]  # (reference's token, this output's token)
    logprob_gap: float  # log p(reference token) - log p(this token) under the target, recomputed; near 0 = a near-tie
    near_tie: bool
    bound: float = NEAR_TIE  # near_tie_bound there
    # (reference run's, this run's) logit gap between its own choice and the other run's there, as recorded
    # (a lower bound where the other choice was past the run's recorded leaders)
    chosen_gaps: tuple[float, float] | None = None


def divergences(loaded, prompts: list[list[int]], outputs: list[str], reference: list[str]) -> list[Divergence]:
    """One Divergence per prompt whose output text differs from the reference's (prompts: chat token ids); both
    texts are tokenised by the target's tokenizer (a server may return text only)."""
    tok = loaded.tokenizer
    pairs = [
        (tok.encode(ref, add_bos=False), tok.encode(out, add_bos=False)) if out != ref else None for out, ref in zip(outputs, reference)
    ]
    return _found(loaded.model, prompts, pairs)


def token_divergences(
    loaded,
    prompts: list[list[int]],
    outputs: list[list[int]],
    reference: list[list[int]],
    margins: list[list[LogitMargin]] | None = None,  # per prompt, per output token: this run's (margins.py)
    reference_margins: list[list[LogitMargin]] | None = None,  # the same for the reference run
) -> list[Divergence]:
    """The same for token ids, as in-process cells have them; with both runs' recorded margins, each judged by them."""
    pairs = [(ref, out) if out != ref else None for out, ref in zip(outputs, reference)]
    both = list(zip(reference_margins, margins)) if margins is not None and reference_margins is not None else None
    return _found(loaded.model, prompts, pairs, both)


@torch.no_grad()
def _found(model, prompts: list[list[int]], pairs: list[tuple[list[int], list[int]] | None], margins=None) -> list[Divergence]:
    found = []
    for i, (ids, pair) in enumerate(zip(prompts, pairs)):
        if pair is None:
            continue
        a, b = pair
        j = first_difference(a, b)
        if j is None or j >= len(a) or j >= len(b):
            continue  # one output stops where the other goes on: a length difference, not a choice between tokens
        context = ids + a[:j]
        cache = model.new_cache(1, len(context) + 1)
        logits = prefill(model, cache, 0, context)[-1].logits[0, -1].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        gap = float(logprobs[a[j]] - logprobs[b[j]])
        recorded = (margins[i][0][j], margins[i][1][j]) if margins is not None else None
        top = max(m.top for m in recorded) if recorded else float(logits.max())
        bound = near_tie_bound(model.dtype, top)
        if recorded is None:
            found.append(Divergence(i, j, (a[j], b[j]), gap, abs(gap) < bound, bound))
            continue
        gaps = (recorded[0].gap_to(b[j]), recorded[1].gap_to(a[j]))  # each run: its choice (its top) to the other's
        near = _near_tie(gaps, bound, abs(gap))
        found.append(Divergence(i, j, (a[j], b[j]), gap, near, bound, tuple(g for g, _ in gaps)))
    return found


def _near_tie(gaps: tuple[tuple[float, bool], tuple[float, bool]], bound: float, recomputed: float) -> bool:
    """Both runs' chosen-token gaps within the bound; a gap known only from below and within it defers to the
    recomputed gap."""
    if any(g >= bound for g, _ in gaps):
        return False
    return all(exact for _, exact in gaps) or recomputed < bound


def divergence_fields(found: list[Divergence]) -> dict:
    return {
        "divergences": [asdict(d) for d in found],
        "all_near_ties": all(d.near_tie for d in found),
        "max_logprob_gap": max((abs(d.logprob_gap) for d in found), default=None),
        "max_chosen_gap": max((max(d.chosen_gaps) for d in found if d.chosen_gaps), default=None),
    }
