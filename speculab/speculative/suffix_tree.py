"""The suffix tree of suffix decoding (Oliaro et al., arXiv 2411.04975), as ArcticInference implements it.

Knows: token sequences, each kept as the trie of its suffixes cut to ``max_depth`` tokens; many sequences share one
tree, and a node's count is how many suffixes pass through it. ``speculate`` matches the end of a context against the
tree (every match length up to ``max_depth - 1``) and follows, from each match, the most frequent child while the
product of the children's frequencies (the path's estimated probability) stays at ``min_token_prob`` or more, for at
most ``match length x max_spec_factor + max_spec_offset`` tokens; the draft with the highest score (the sum of its
tokens' probabilities) wins, the longer match on a tie.

Behaves as ArcticInference's ``suffix_decoding`` (0.3.0, the library vLLM's ``method: "suffix"`` calls) does for path
drafts, ties included: children stay ordered by count, and a child whose count changes moves within the order exactly
as its sibling lists move one (``_raise``, ``_lower``); the arithmetic is float32, as there. The tests hold this
against the library itself where vLLM's environment has it. Stored uncompressed (one node a token), which changes
memory, not answers.

``new_tree`` picks the C++ twin (``native/suffix_tree.cpp``, the same rules) where speculab's native build runs.

Does not know: requests, slots, the engine (``suffix.py``), or what a draft is for.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from speculab.native import kernels

_FLOAT32 = struct.Struct("f")


def _f32(x: float) -> float:
    """``x`` rounded to float32. Each float32 operation is done in float64 and then rounded: for +, x and / of
    float32 values that is the float32 result exactly (53 >= 2 x 24 + 2 bits: double rounding is innocuous)."""
    return _FLOAT32.unpack(_FLOAT32.pack(x))[0]


class _Node:
    __slots__ = ("children", "count", "order", "token")

    def __init__(self, token: int) -> None:
        self.token = token
        self.count = 0
        self.children: dict[int, _Node] = {}
        self.order: list[_Node] = []  # children, most frequent first (see _raise/_lower for ties)


def _raise(order: list[_Node], node: _Node) -> None:
    """Count + 1: the child moves before the first sibling of the count its predecessor has, when that is its new
    count or its old one (ArcticInference's ``_increment_count``)."""
    i = order.index(node)
    count = node.count
    node.count = count + 1
    if i == 0 or order[i - 1].count > count + 1:
        return
    target = order[i - 1].count
    j = i - 1
    while j > 0 and order[j - 1].count == target:
        j -= 1
    del order[i]
    order.insert(j, node)


def _lower(order: list[_Node], node: _Node) -> None:
    """Count - 1: a child with equal-count siblings after it moves to just before the first sibling counting less
    (ArcticInference's ``_decrement_count``)."""
    i = order.index(node)
    count = node.count
    node.count = count - 1
    if i + 1 == len(order) or order[i + 1].count != count:
        return
    k = i + 1
    while k < len(order) and order[k].count == count:
        k += 1
    del order[i]
    order.insert(k - 1, node)


@dataclass
class SuffixDraft:
    """A path draft: its tokens, each one's estimated probability, their sum (the score), and the match it followed."""

    token_ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0  # a float32 value
    match_len: int = 0


class SuffixTree:
    """Suffixes (cut to ``max_depth`` tokens) of any number of sequences, each named by an int."""

    def __init__(self, max_depth: int) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, not {max_depth}")
        self.max_depth = max_depth
        self._root = _Node(-1)
        self._seqs: dict[int, list[int]] = {}
        self._active: dict[int, deque[_Node]] = {}  # per sequence: where its last max_depth suffixes end

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._seqs

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to sequence ``seq_id`` (a new one when unseen)."""
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, deque(maxlen=self.max_depth))
        root = self._root
        for token in tokens:
            token = int(token)
            active.append(root)
            root.count += 1
            seq.append(token)
            for i, node in enumerate(active):
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node(token)
                    child.count = 1
                    node.order.append(child)
                elif node is root or node.order[0] is child:  # the root's order is never read (a match is a token at least)
                    child.count += 1
                else:
                    _raise(node.order, child)
                active[i] = child

    def remove(self, seq_id: int) -> None:
        """Forget sequence ``seq_id``: every suffix's counts down, nodes no suffix passes through any more dropped."""
        if seq_id not in self._seqs:
            return
        seq = self._seqs.pop(seq_id)
        self._active.pop(seq_id)
        root = self._root
        for start in range(len(seq)):
            root.count -= 1
            node = root
            for token in seq[start : start + self.max_depth]:
                child = node.children.get(token)
                if child is None:
                    break
                if child.count == 1:
                    del node.children[token]
                    node.order.remove(child)
                    break
                if node is root:
                    child.count -= 1
                else:
                    _lower(node.order, child)
                node = child

    def _match(self, pattern: Sequence[int]) -> _Node | None:
        node = self._root
        for token in pattern:
            node = node.children.get(token)
            if node is None:
                return None
        return node

    def speculate(
        self, context: Sequence[int], *, max_spec_tokens: int, max_spec_factor: float, max_spec_offset: float, min_token_prob: float
    ) -> SuffixDraft:
        """The best path draft after ``context`` (its last ``max_depth`` tokens matter), as ArcticInference's."""
        context = [int(t) for t in context[-self.max_depth :]]
        best = SuffixDraft()
        factor, offset, floor = _f32(max_spec_factor), _f32(max_spec_offset), _f32(min_token_prob)
        for match_len in range(1, len(context)):
            node = self._match(context[len(context) - match_len :])
            if node is None:
                break
            most = int(_f32(_f32(match_len * factor) + offset) + 1e-6)
            draft = _follow(node, max(0, min(max_spec_tokens, most)), floor)
            if draft.score >= best.score:
                draft.match_len = match_len
                best = draft
        return best


def _follow(node: _Node, most: int, floor: float) -> SuffixDraft:
    """From ``node``, the most frequent child at each step while the path's probability stays at ``floor`` or more."""
    draft = SuffixDraft()
    tokens, probs = draft.token_ids, draft.probs
    prob, score = 1.0, 0.0  # prob never rises: while it is 1.0 the score counts tokens, exactly
    while len(tokens) < most and node.order:
        child = node.order[0]
        if child.count != node.count:
            prob = _f32(prob * _f32(child.count / node.count))
            if prob < floor:
                break
        tokens.append(child.token)
        probs.append(prob)
        score = score + 1.0 if prob == 1.0 else _f32(score + prob)
        node = child
    draft.score = score
    return draft


class NativeSuffixTree:
    """``SuffixTree`` in C++ (``speculab.native``, ``native/suffix_tree.cpp``): the same answers, built about fifteen
    times faster (a 1,200-token prompt's tree: about 50 ms in Python)."""

    def __init__(self, max_depth: int, native) -> None:
        self.max_depth = max_depth
        self._tree = native.SuffixTree(max_depth)

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._tree

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        self._tree.extend(seq_id, list(tokens))

    def remove(self, seq_id: int) -> None:
        self._tree.remove(seq_id)

    def speculate(
        self, context: Sequence[int], *, max_spec_tokens: int, max_spec_factor: float, max_spec_offset: float, min_token_prob: float
    ) -> SuffixDraft:
        tokens, probs, score, match_len = self._tree.speculate(
            list(context[-self.max_depth :]), max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob
        )
        return SuffixDraft(tokens, probs, score, match_len)


def new_tree(max_depth: int) -> SuffixTree | NativeSuffixTree:
    """The C++ tree where speculab's native build runs here, else the Python one."""
    native = kernels()
    return NativeSuffixTree(max_depth, native) if native is not None and hasattr(native, "SuffixTree") else SuffixTree(max_depth)
