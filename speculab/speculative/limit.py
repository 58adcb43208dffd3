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

from typing import Any

from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.tree import Draft


class SpeculationLimit:
    """Wraps a proposer: speculate while at most ``max_batch_size`` requests run, decode plainly above."""

    def __init__(self, inner: Proposer, max_batch_size: int):
        if max_batch_size < 1:
            raise ValueError("disable_by_batch_size must be at least 1")
        self.inner, self.max_batch_size = inner, max_batch_size
        self.skipped_steps = 0

    def propose(self, state: ProposeState) -> list[Draft]:
        if len(state.requests) > self.max_batch_size:
            self.skipped_steps += 1
            return [Draft.empty() for _ in state.requests]
        return self.inner.propose(state)

    def __getattr__(self, name: str) -> Any:
        """Everything else (the attributes the engine reads, slot bookkeeping) is the inner proposer's."""
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
