"""Drafts known to be right: an oracle that drafts the target's own greedy continuation.

Through the real accept / compact / bonus path, every step must then accept every draft token
along the path (τ = k + 1), for chains and for trees whose right branch hides among wrong
siblings, at batch > 1 with ragged prompts; and the output must still be the baseline's.
"""

from __future__ import annotations

import pytest
import torch

from speculab.engine import Engine
from speculab.sampling import SamplingParams
from speculab.speculative.proposer import Proposer
from speculab.speculative.tree import Draft
from tests.helpers import KERNELS, tiny_target

MAX_TOKENS = 25
PARAMS = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)


class Oracle(Proposer):
    """Drafts the next ``k`` tokens of a known continuation; with ``decoys``, each depth also carries wrong siblings
    (placed before the right node, so the verifier must find it)."""

    name = "oracle"

    def __init__(self, futures: dict[tuple, list[int]], k: int, decoys: int = 0):
        self.futures, self.k, self.decoys = futures, k, decoys
        self.max_draft_tokens = k * (1 + decoys)

    def propose(self, state):
        return [self._draft(r) for r in state.requests]

    def _draft(self, request) -> Draft:
        future = self.futures[tuple(request.prompt_ids)]
        done = len(request.output_ids)
        right = future[done : done + self.k]
        tokens, parents, parent = [], [], -1
        for token in right:
            for d in range(self.decoys):
                tokens.append((token + 1 + d) % 256)  # a wrong sibling under the same parent
                parents.append(parent)
            tokens.append(token)
            parents.append(parent)
            parent = len(tokens) - 1
        return Draft(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long))


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
