"""Drafts known to be right: an oracle that drafts the target's own greedy continuation.

Through the real accept / compact / bonus path, every step must then accept every draft token
along the path (τ = k + 1), for chains and for trees whose right branch hides among wrong
siblings, at batch > 1 with ragged prompts; and the output must still be the baseline's.
"""

from __future__ import annotations

import pytest
import torch

from speculab.bench.margins import MarginsByRequest
from speculab.engine import Engine
from speculab.sampling import SamplingParams
from tests.helpers import KERNELS, Oracle, tiny_target

MAX_TOKENS = 25
PARAMS = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module", params=KERNELS)
def target(request):
    return tiny_target(request.param, seed=5)[1]


def prompts(batch: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(batch)
    return [torch.randint(3, 256, (3 + 2 * i,), generator=g).tolist() for i in range(batch)]


@pytest.mark.parametrize("k,decoys", [(1, 0), (3, 0), (4, 2)], ids=["chain-1", "chain-3", "tree-3-decoys-wide"])
@pytest.mark.parametrize("batch", [1, 3])
def test_every_draft_token_is_accepted_when_drafts_are_right(target, k, decoys, batch):
    ps = prompts(batch)
    base = Engine(target, batch, 128).generate(ps, PARAMS)
    futures = {tuple(p): r.output_ids for p, r in zip(ps, base)}
    requests = Engine(target, batch, 128, proposer=Oracle(futures, k, decoys)).generate(ps, PARAMS)
    steps, accepted, done = 0, 0, 1  # the prefill gives the first token
    while done < MAX_TOKENS:  # each step: every drafted token accepted, then the bonus token (cut at the budget)
        drafted = min(k, MAX_TOKENS - done)
        steps, accepted, done = steps + 1, accepted + drafted, done + drafted + 1
    for request, plain in zip(requests, base):
        assert request.output_ids == plain.output_ids
        stats = request.stats
        assert (stats.steps, stats.accepted_tokens) == (steps, accepted)
        assert stats.acceptance_rate == 1.0
        assert stats.accepted_per_position[0] == steps  # the first draft token was right on every step
        assert stats.conditional_acceptance == [1.0] * k  # every depth tested was accepted, in trees too
        assert stats.mean_acceptance_length == pytest.approx((accepted + steps) / steps)
        assert stats.mean_acceptance_length >= k + 1 - k / steps  # τ = k + 1 on every step but perhaps the last


def test_verified_tokens_record_the_margins_plain_decoding_saw(target):
    """Each emitted token's logit margin comes from the tree node it was chosen at, in verification as in plain decoding."""
    ps = prompts(3)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    base_margins = MarginsByRequest()
    base = Engine(target, 3, 128, token_logits=True).generate(ps, params, on_token=base_margins.add)
    futures = {tuple(p): r.output_ids for p, r in zip(ps, base)}
    margins = MarginsByRequest()
    runs = Engine(target, 3, 128, proposer=Oracle(futures, 4, 2), token_logits=True).generate(ps, params, on_token=margins.add)
    for request, plain, mine, theirs in zip(runs, base, margins.of(runs), base_margins.of(base)):
        assert request.output_ids == plain.output_ids and len(mine) == len(request.output_ids)
        assert [m.gap for m in mine] == pytest.approx([m.gap for m in theirs], abs=1e-4)
