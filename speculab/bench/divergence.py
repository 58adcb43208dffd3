"""Where two greedy outputs part, and whether the target was nearly tied there.

Greedy outputs of two engines (or of one engine at two batch sizes) may part where the target's
two best tokens are within rounding of each other: a near-tie, not a bug. For each prompt whose
output differs from the reference, this finds the first token where they differ (both texts
tokenised by the target's tokenizer), runs the target on the chat prompt plus the shared tokens,
and reports the log-probability gap between the two tokens chosen there. A gap below
``NEAR_TIE`` nats is a near-tie.

Knows: the loaded target (speculab's own model code, the run's dtype) and its tokenizer.
Does not know: HTTP or how the outputs were produced.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from speculab.models.llama import prefill

NEAR_TIE = 0.05  # nats between the two tokens' log-probabilities: rounding of fp32/bf16 kernels moves logits far less


@dataclass(frozen=True)
class Divergence:
    prompt: int  # index in the cell's prompts
    token_index: int  # first output token that differs
    tokens: tuple[int, int]  # (reference's token, this output's token)
    logprob_gap: float  # log p(reference token) - log p(this token) under the target; near 0 = a near-tie
    near_tie: bool


def first_difference(a: list[int], b: list[int]) -> int | None:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return n if n is not None else (None if len(a) == len(b) else min(len(a), len(b)))


def divergences(loaded, prompts: list[list[int]], outputs: list[str], reference: list[str]) -> list[Divergence]:
    """One Divergence per prompt whose output text differs from the reference's (prompts: chat token ids); both
    texts are tokenised by the target's tokenizer (a server may return text only)."""
    tok = loaded.tokenizer
    pairs = [
        (tok.encode(ref, add_bos=False), tok.encode(out, add_bos=False)) if out != ref else None for out, ref in zip(outputs, reference)
    ]
    return _found(loaded.model, prompts, pairs)


def token_divergences(loaded, prompts: list[list[int]], outputs: list[list[int]], reference: list[list[int]]) -> list[Divergence]:
    """The same for token ids, as in-process cells have them."""
    return _found(loaded.model, prompts, [(ref, out) if out != ref else None for out, ref in zip(outputs, reference)])


@torch.no_grad()
def _found(model, prompts: list[list[int]], pairs: list[tuple[list[int], list[int]] | None]) -> list[Divergence]:
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
        logprobs = torch.log_softmax(prefill(model, cache, 0, context)[-1].logits[0, -1].float(), dim=-1)
        gap = float(logprobs[a[j]] - logprobs[b[j]])
        found.append(Divergence(i, j, (a[j], b[j]), gap, abs(gap) < NEAR_TIE))
    return found


def divergence_fields(found: list[Divergence]) -> dict:
    return {
        "divergences": [asdict(d) for d in found],
        "all_near_ties": all(d.near_tie for d in found),
        "max_logprob_gap": max((abs(d.logprob_gap) for d in found), default=None),
    }
