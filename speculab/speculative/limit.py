"""Speculation only while the batch is small: any proposer, switched off above a batch size.

A verify step's extra tokens are nearly free while decoding is memory-bound
(small batches) and cost their full price once it is compute-bound (large
batches), where speculation slows decoding down. vLLM v0 offered the same knob
as ``speculative_disable_by_batch_size``; the benchmark's break-even batch size
says where to set it.

Knows: the batch size of each step. Above ``max_batch_size`` it proposes empty
drafts (plain decoding) but keeps the inner proposer's per-slot state current
(admit, observe, move, release still reach it), so speculation resumes when the
batch shrinks: the inner proposer catches up on the tokens it did not draft.
Does not know: anything about how the inner proposer drafts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.tree import Draft

if TYPE_CHECKING:
    from torch import Tensor

    from speculab.models.config import ModelConfig
    from speculab.request import Request


class WrappedProposer(Proposer):
    """A proposer that is another one's in every part of the interface: the base of proposers that only decide
    how much of the inner one's drafts a step uses (``SpeculationLimit``, ``policy.PolicyProposer``)."""

    def __init__(self, inner: Proposer):
        self.inner = inner
        self.name = inner.name
        self.max_draft_tokens = inner.max_draft_tokens
        self.needs_features = inner.needs_features
        self.feature_layers = inner.feature_layers
        self.prefix_chains = inner.prefix_chains
        self.learns_across_requests = inner.learns_across_requests

    def propose(self, state: ProposeState) -> list[Draft]:
        return self.inner.propose(state)

    @property
    def headroom(self) -> int:
        return self.inner.headroom

    def bind(self, num_slots: int, max_seq_len: int, target: ModelConfig) -> None:
        self.inner.bind(num_slots, max_seq_len, target)

    def admit(self, slot: int, request: Request, features: Tensor | None = None) -> None:
        self.inner.admit(slot, request, features)

    @property
    def prompt_cache_key(self) -> object | None:
        return self.inner.prompt_cache_key

    def prompt_state(self, slot: int) -> Any:
        return self.inner.prompt_state(slot)

    def admit_cached(self, slot: int, request: Request, features: Tensor | None, state: Any) -> None:
        self.inner.admit_cached(slot, request, features, state)

    def observe(self, slot: int, features: Tensor) -> None:
        self.inner.observe(slot, features)

    def move(self, src: int, dst: int) -> None:
        self.inner.move(src, dst)

    def release(self, slot: int) -> None:
        self.inner.release(slot)


class SpeculationLimit(WrappedProposer):
    """Wraps a proposer: speculate while at most ``max_batch_size`` requests run, decode plainly above."""

    def __init__(self, inner: Proposer, max_batch_size: int):
        if max_batch_size < 1:
            raise ValueError("disable_by_batch_size must be at least 1")
        super().__init__(inner)
        self.max_batch_size = max_batch_size

    def propose(self, state: ProposeState) -> list[Draft]:
        if len(state.requests) > self.max_batch_size:
            return [Draft.empty() for _ in state.requests]
        return self.inner.propose(state)
