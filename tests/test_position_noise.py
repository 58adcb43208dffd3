"""Position-keyed noise: pinned values (stable across releases), independent positions, the race's marginal."""

import math

import numpy as np
import torch

from speculab.position_noise import PositionNoise, coupled_tokens, exponentials, uniforms


def test_the_noise_is_a_pure_function_of_seed_and_position_pinned():
    # these values are the contract: a change here changes every seeded request's output
    assert uniforms(7, 3, 4).tolist() == [0.5884724855422974, 0.43900224566459656, 0.3042767345905304, 0.16565868258476257]
    assert uniforms(7, 3, 5)[:4].tolist() == uniforms(7, 3, 4).tolist()  # a longer vocabulary extends, never reshuffles
    assert uniforms(-1, 0, 2).tolist() == uniforms(2**64 - 1, 0, 2).tolist()  # seeds modulo 2**64, as torch takes them
    assert torch.equal(exponentials(7, 3, 4), torch.from_numpy(-np.log(uniforms(7, 3, 4))))


def test_positions_and_seeds_do_not_share_a_stream():
    size = 4096
    rows = {(s, t): uniforms(s, t, size) for s in (1, 2) for t in (0, 1, 2)}
    for a, u in rows.items():
        assert 0 < u.min() and u.max() < 1
        for b, v in rows.items():
            if a < b:  # no shifted copy (one position's blocks inside another's) and no correlation
                assert len(np.intersect1d(u, v)) < 8 and abs(np.corrcoef(u, v)[0, 1]) < 0.06


def test_noise_is_kept_until_emitted():
    noise = PositionNoise(seed=3, vocab_size=16)
    first = noise.at([5, 6, 5])
    assert torch.equal(first[0], first[2]) and torch.equal(first[0], exponentials(3, 5, 16))
    noise.forget_before(6)
    assert torch.equal(noise.at([6])[0], first[1]) and set(noise._kept) == {6}


def test_the_exponential_race_picks_each_token_with_its_probability():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    n = 20000
    picks = torch.tensor([coupled_tokens(p[None], exponentials(seed, 0, 5)[None])[0] for seed in range(n)])
    counts = torch.bincount(picks, minlength=5).double() / n
    floor = 0.5 * sum(math.sqrt(2 * q * (1 - q) / (math.pi * n)) for q in p.tolist())  # E[TV] of n exact draws
    assert 0.5 * float((counts - p.double()).abs().sum()) < 2.5 * floor and counts[4] == 0
