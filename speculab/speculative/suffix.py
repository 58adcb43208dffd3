"""Suffix decoding's proposer (ArcticInference's ``suffix`` method, vLLM's ``method: "suffix"``), with vLLM's names.

Knows: two kinds of suffix tree (``suffix_tree.py``). Each running request has a tree of its own over its prompt and
its output so far; one tree shared by every request holds the outputs of the last ``max_cached_requests`` requests
(finished ones included: what an agent's earlier turns produced is often what it asks for again), the oldest forgotten
first. Each step a request's draft is the better scoring of the two trees' drafts after its last ``max_tree_depth``
tokens (its own on a tie), as vLLM's proposer asks ArcticInference for; the draft's length adapts to the match
(``max_spec_factor`` tokens a matched token, ``min_token_prob`` the least probability a drafted path keeps).
Drafts are deterministic: q is a point mass, as n-gram's.

Does not know: any model, the target's cache, or verification.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.suffix_tree import SuffixDraft, SuffixTree, new_tree
from speculab.speculative.tree import Draft


class SuffixCache:
    """Each running request's own tree and the tree of the last ``max_cached_requests`` outputs, by request key:
    the calls vLLM makes of ArcticInference's ``SuffixDecodingCache`` (start, add, speculate, stop)."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int, tree: Callable[[int], SuffixTree] = new_tree) -> None:
        self.depth, self.max_cached, self._tree = max_tree_depth, max_cached_requests, tree
        self.shared = tree(max_tree_depth)
        self._own: dict[object, SuffixTree] = {}
        self._seq: OrderedDict[object, int] = OrderedDict()  # requests whose output the shared tree holds, oldest first
        self._next_seq = 0

    def start(self, key: object, prompt: list[int]) -> None:
        self._own[key] = self._tree(self.depth)
        self._own[key].extend(0, prompt)
        if self.max_cached:
            if key in self._seq:
                self.shared.remove(self._seq.pop(key))
            self._seq[key] = self._next_seq
            self._next_seq += 1
            while len(self._seq) > self.max_cached:
                self.shared.remove(self._seq.popitem(last=False)[1])

    def add(self, key: object, tokens: list[int]) -> None:
        self._own[key].extend(0, tokens)
        if key in self._seq:
            self.shared.extend(self._seq[key], tokens)

    def speculate(self, key: object, context: list[int], *, most: int, factor: float, floor: float) -> SuffixDraft:
        """The better scoring of the request's own tree's and the shared tree's drafts (its own on a tie)."""
        context = context[-self.depth :]
        own, shared = (
            tree.speculate(context, max_spec_tokens=most, max_spec_factor=factor, max_spec_offset=0.0, min_token_prob=floor)
            for tree in (self._own[key], self.shared)
        )
        return own if own.score >= shared.score else shared

    def stop(self, key: object) -> None:
        del self._own[key]


class SuffixProposer(Proposer):
    name = "suffix"
    # a budgeted draft is the unbudgeted one's prefix unless a lower budget changes which match scores best (rare)
    prefix_chains = True
    learns_across_requests = True

    def __init__(
        self, *, num_speculative_tokens: int, max_tree_depth: int, max_cached_requests: int, max_spec_factor: float, min_token_prob: float
    ):
        if num_speculative_tokens < 1 or max_tree_depth < 1:
            raise ValueError("num_speculative_tokens and max_tree_depth must be at least 1")
        if max_cached_requests < 0 or max_spec_factor < 0 or not 0 <= min_token_prob <= 1:
            raise ValueError("need max_cached_requests >= 0, max_spec_factor >= 0 and 0 <= min_token_prob <= 1")
        self.k, self.factor, self.floor = num_speculative_tokens, max_spec_factor, min_token_prob
        self.max_draft_tokens = num_speculative_tokens
        self.cache = SuffixCache(max_tree_depth, max_cached_requests)
        self._next_key = 0
        self._slots: list[list[int] | None] = []  # per slot: [the request's cache key, output tokens already added]

    def bind(self, num_slots: int, max_seq_len: int, target) -> None:
        self._slots = [None] * num_slots

    def admit(self, slot: int, request, features=None) -> None:
        key, self._next_key = self._next_key, self._next_key + 1
        self.cache.start(key, request.prompt_ids)
        self._slots[slot] = [key, 0]

    def propose(self, state: ProposeState) -> list[Draft]:
        budgets = state.draft_budgets or [None] * len(state.requests)
        return [self._draft(slot, r, budget) for slot, (r, budget) in enumerate(zip(state.requests, budgets, strict=True))]

    def _draft(self, slot: int, request, budget: int | None) -> Draft:
        key, seen = self._slots[slot]
        self.cache.add(key, request.output_ids[seen:])
        self._slots[slot][1] = len(request.output_ids)
        context = (request.prompt_ids + request.output_ids)[-self.cache.depth :]
        most = self.k if budget is None else min(self.k, budget)
        return Draft.chain(self.cache.speculate(key, context, most=most, factor=self.factor, floor=self.floor).token_ids)

    def move(self, src: int, dst: int) -> None:
        self._slots[dst], self._slots[src] = self._slots[src], None

    def release(self, slot: int) -> None:
        self.cache.stop(self._slots[slot][0])
        self._slots[slot] = None
