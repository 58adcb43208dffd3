"""N-gram proposer (prompt lookup), with vLLM's parameter names.

Knows: the request's own tokens (prompt and output so far). It looks for the
longest suffix n-gram, ``prompt_lookup_max`` down to ``prompt_lookup_min``
tokens, that occurred earlier in the sequence, and proposes the (up to)
``num_speculative_tokens`` tokens that followed its most recent occurrence.
Does not know: any model; its drafts are deterministic (q is a point mass).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.tree import Draft


def lookup(sequence: np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """Tokens that followed the most recent earlier occurrence of the longest matching suffix."""
    for n in range(min(max_n, len(sequence) - 1), min_n - 1, -1):
        windows = sliding_window_view(sequence[:-1], n)  # excludes the suffix matching itself
        hits = np.flatnonzero((windows == sequence[-n:]).all(axis=1))
        if hits.size:
            start = hits[-1] + n
            return sequence[start : start + k].tolist()
    return []


class NgramProposer(Proposer):
    name = "ngram"
    prefix_chains = True  # the lookup's continuation, cut at the budget

    def __init__(self, *, num_speculative_tokens: int, prompt_lookup_min: int, prompt_lookup_max: int):
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        if num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be at least 1")
        self.k, self.min_n, self.max_n = num_speculative_tokens, prompt_lookup_min, prompt_lookup_max
        self.max_draft_tokens = num_speculative_tokens

    def propose(self, state: ProposeState) -> list[Draft]:
        drafts = []
        budgets = state.draft_budgets or [None] * len(state.requests)
        for r, budget in zip(state.requests, budgets, strict=True):
            sequence = np.asarray(r.prompt_ids + r.output_ids, dtype=np.int64)
            drafts.append(Draft.chain(lookup(sequence, self.min_n, self.max_n, self.k if budget is None else min(self.k, budget))))
        return drafts
