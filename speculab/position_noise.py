"""Position-keyed noise: the randomness of a sampled request's output position t, a pure function of (seed, t).

Knows: the Gumbel-max coupling (Daliri, Musco and Suresh, "Coupling without Communication and Drafter-Invariant
Speculative Decoding", 2024). The token at output position t is argmax_v p_t(v) / E_t(v), where p_t is the request's
sampling distribution (``sampling.sampling_probs``) and E_t(v) = -log U_t(v) are independent exponential variables
(the exponential race: the argmax is distributed as p_t, so plain sampling stays exact). U_t comes from Philox-4x64
(numpy's, whose bit streams numpy keeps stable across releases) keyed by the seed, its counter starting at
(0, t, 0, 0), each 64-bit draw giving two 32-bit words (low first), each word's top 24 bits one fp32 uniform in
(0, 1). A speculative step that accepts a draft node
exactly when its token equals that argmax at its position therefore emits, token for token, what plain sampling
with the same seed emits, whatever was drafted, at any batch size and under any policy (``verify.verify_coupled``).

Does not know: drafts, trees, engines or requests.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from speculab.sampling import greedy_tokens

SEED_BITS = 64  # a seed is taken modulo 2**64 (a negative seed as torch.Generator.manual_seed takes it)


def uniforms(seed: int, position: int, size: int) -> np.ndarray:
    """[size] float32 in (0, 1): output position ``position``'s uniforms under ``seed``."""
    # the position in the counter's second word: the first counts the stream's blocks, so positions never overlap
    bits = np.random.Philox(key=seed % (1 << SEED_BITS), counter=[0, position, 0, 0]).random_raw((size + 1) // 2)
    words = bits.astype("<u8").view("<u4")[:size]  # each 64-bit draw as two 32-bit words, low word first
    return ((words >> np.uint32(8)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-24)


def exponentials(seed: int, position: int, size: int) -> Tensor:
    """[size] fp32: -log of ``uniforms``, E_t(v) of the module docstring."""
    u = uniforms(seed, position, size)
    # numpy's log: one thread, ~10 us for 49,152 values; torch's may wait for its thread pool on a busy machine
    return torch.from_numpy(np.negative(np.log(u, out=u), out=u))


class PositionNoise:
    """One request's E_t for every vocabulary token, each output position's drawn once and kept until it is emitted
    (a drafter and the verification of one step read the same positions)."""

    def __init__(self, seed: int, vocab_size: int):
        self.seed, self.vocab_size = seed, vocab_size
        self._kept: dict[int, Tensor] = {}

    def at(self, positions: list[int]) -> Tensor:
        """[len(positions), vocab] fp32: E_t for each position t (repeats allowed)."""
        for t in set(positions) - self._kept.keys():
            self._kept[t] = exponentials(self.seed, t, self.vocab_size)
        return torch.stack([self._kept[t] for t in positions])

    def forget_before(self, position: int) -> None:
        """Drop the positions before ``position``: they are emitted and never read again."""
        for t in [t for t in self._kept if t < position]:
            del self._kept[t]


def coupled_tokens(probs: Tensor, noise: Tensor) -> list[int]:
    """Each row's argmax of probs / noise: the token the exponential race picks.

    probs: [n, vocab] fp32 sampling distributions (0 outside top-k/top-p); noise: [n, vocab] E_t of each row's position.
    """
    return greedy_tokens(probs / noise)
