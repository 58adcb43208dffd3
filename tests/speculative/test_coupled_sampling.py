"""Coupled sampling end to end: a seeded request's tokens are plain sampling's for that seed, whatever was drafted.

For every method (chains and trees, sampled and deterministic drafts, a reduced draft vocabulary) and under a policy
that changes the drafts mid-request, each seeded request is compared token for token with plain decoding of the same
seed: alone at batch 1, and in a batch of 16 beside greedy requests and unseeded ones sampled by rejection. The
distribution the coupled tokens follow is ``test_sampling_lossless.py``'s (its seeded requests are coupled).
"""

from __future__ import annotations

import pytest
import torch

from speculab.engine import Engine
from speculab.methods import make_proposer
from speculab.sampling import SamplingParams
from speculab.speculative.policy_proposer import PolicyProposer
from tests.speculative.test_sampling_lossless import FILTERED, METHODS, PARAMS, PLAIN, POLICIES, PROMPT, tiny_target_and_heads

SEEDS = list(range(40, 56))  # 16 seeded requests
LENGTH = 12


@pytest.fixture(scope="module")
def drafters(tmp_path_factory):
    target, drafter, eagle, eagle3 = tiny_target_and_heads(tmp_path_factory.mktemp("heads"))
    return dict(target=target, drafter=drafter, eagle=eagle, eagle3=eagle3)


def seeded(params: SamplingParams, seed: int | None, verify: str = "auto") -> SamplingParams:
    return SamplingParams(**{**params.__dict__, "max_tokens": LENGTH, "seed": seed, "sampling_verify": verify})


def plain_outputs(target, params: SamplingParams) -> list[list[int]]:
    engine = Engine(target, max_batch=1, max_seq_len=32)
    return [r.output_ids for r in engine.generate([PROMPT] * len(SEEDS), [seeded(params, s) for s in SEEDS])]


def new_proposer(method: str, drafters: dict):
    name, options = METHODS[method]
    proposer = make_proposer(name, **options(drafters))
    return PolicyProposer(proposer, POLICIES[method]) if method in POLICIES else proposer


def beside_others(target, proposer, params: SamplingParams) -> list[list[int]]:
    """The seeded requests in one batch of 16 slots with 8 greedy and 8 unseeded (rejection) ones, shuffled."""
    others = [SamplingParams(max_tokens=LENGTH, ignore_eos=True)] * 8 + [seeded(params, None, "rejection")] * 8
    every = [seeded(params, s) for s in SEEDS] + others
    order = torch.randperm(len(every), generator=torch.Generator().manual_seed(3)).tolist()
    done = Engine(target, max_batch=16, max_seq_len=32, proposer=proposer).generate([PROMPT] * len(every), [every[i] for i in order])
    by_index = dict(zip(order, done))
    return [by_index[i].output_ids for i in range(len(SEEDS))]


@pytest.mark.long  # every method twice over (make test-fast keeps test_lossless.py's seeded cases)
@pytest.mark.parametrize("method", list(METHODS))
def test_a_seeded_request_gives_plain_samplings_tokens_alone_and_beside_others(drafters, method):
    target = drafters["target"]
    params = PARAMS.get(method, PLAIN)
    expected = plain_outputs(target, params)
    alone = Engine(target, max_batch=1, max_seq_len=32, proposer=new_proposer(method, drafters))
    requests = alone.generate([PROMPT] * len(SEEDS), [seeded(params, s) for s in SEEDS])
    assert [r.output_ids for r in requests] == expected
    assert sum(r.stats.accepted_tokens for r in requests) > 0  # drafts were accepted: the coupled path ran
    assert beside_others(target, new_proposer(method, drafters), params) == expected


def test_an_unseeded_coupled_request_keeps_the_seed_it_drew(drafters):
    target = drafters["target"]
    engine = Engine(target, max_batch=4, max_seq_len=32, proposer=new_proposer("eagle-tree", drafters))
    drawn = engine.generate([PROMPT] * 4, [seeded(FILTERED, None, "coupled")] * 4)
    seeds = [r.noise.seed for r in drawn]
    assert len(set(seeds)) == 4  # each request its own
    again = Engine(target, max_batch=1, max_seq_len=32).generate([PROMPT] * 4, [seeded(FILTERED, s) for s in seeds])
    assert [r.output_ids for r in again] == [r.output_ids for r in drawn]


def test_rejection_is_kept_for_a_seeded_request_that_asks_for_it(drafters):
    request = Engine(drafters["target"], max_batch=1, max_seq_len=32).add_request(PROMPT, seeded(PLAIN, 5, "rejection"))
    assert request.noise is None and request.generator is not None
    with pytest.raises(ValueError, match="sampling_verify"):
        SamplingParams(temperature=1.0, sampling_verify="gumbel")
