"""Draft trees: what a proposer hands the verifier.

Knows: a draft as its tokens and the parent index of each node (``-1`` = the
root, i.e. the last token already emitted but not yet in the target's cache).
A chain is the tree where node i's parent is i-1. From the parents it derives
depths, the ancestor (attention) mask and the root-to-leaf paths. A parent
always precedes its children; that is checked, not assumed. ``verify_batch`` lays a
batch's trees out as one forward's tokens, positions and masks.

Does not know: models' weights, scores or how the tree was grown (that is each proposer's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from speculab.models.llama import ForwardBatch, causal_batch


@dataclass(frozen=True)
class Draft:
    """Draft tokens for one request.

    tokens:  [num_draft] proposed token ids
    parents: [num_draft] parent of each node; -1 = the root (the request's last token)
    probs:   [num_draft, vocab] the draft distribution each token was sampled from,
             or None when drafts are deterministic (top-k, n-gram: q is a point mass)
    """

    tokens: Tensor  # [num_draft]
    parents: Tensor  # [num_draft]
    probs: Tensor | None = None  # [num_draft, vocab]

    def __post_init__(self) -> None:
        n = self.tokens.numel()
        if self.parents.numel() != n:
            raise ValueError(f"draft has {n} tokens but {self.parents.numel()} parents")
        if n and bool((self.parents >= torch.arange(n)).any()):
            raise ValueError("every draft node's parent must come before it")
        if self.probs is not None and self.probs.shape[0] != n:
            raise ValueError(f"draft has {n} tokens but {self.probs.shape[0]} probability rows")

    @classmethod
    def empty(cls) -> Draft:
        return cls(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))

    @classmethod
    def chain(cls, tokens: list[int] | Tensor, probs: Tensor | None = None) -> Draft:
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        return cls(tokens, torch.arange(tokens.numel()) - 1, probs)

    def __len__(self) -> int:
        return self.tokens.numel()

    def first(self, n: int) -> Draft:
        """The first n nodes: a chain's prefix, or a tree's nodes up to n (every parent comes before its children,
        so they are a tree again)."""
        if n >= len(self):
            return self
        return Draft(self.tokens[:n], self.parents[:n], None if self.probs is None else self.probs[:n])


@dataclass(frozen=True)
class VerifyTree:
    """A draft with its root prepended: node 0 is the root, node i+1 is draft node i.

    tokens:  [n] root token then the draft tokens
    parents: [n] -1 for the root
    depth:   [n] 0 for the root
    """

    tokens: Tensor
    parents: Tensor
    depth: Tensor
    draft_probs: Tensor | None  # [n - 1, vocab]

    @classmethod
    def from_draft(cls, root_token: int, draft: Draft) -> VerifyTree:
        tokens = torch.cat([torch.tensor([root_token]), draft.tokens])
        parents = torch.cat([torch.tensor([-1]), draft.parents + 1])
        depth = torch.zeros(len(tokens), dtype=torch.long)
        for i in range(1, len(tokens)):  # parents precede children, so one pass suffices
            depth[i] = depth[parents[i]] + 1
        return cls(tokens, parents, depth, draft.probs)

    def __len__(self) -> int:
        return self.tokens.numel()

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    def ancestor_mask(self) -> Tensor:
        """[n, n] bool: node i may attend to node j (j is i or an ancestor of i)."""
        n = len(self)
        mask = torch.eye(n, dtype=torch.bool)
        for i in range(1, n):
            mask[i] |= mask[self.parents[i]]
        return mask

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in range(len(self))]
        for i in range(1, len(self)):
            kids[int(self.parents[i])].append(i)
        return kids


def verify_batch(trees: list[VerifyTree], start: list[int], device: torch.device) -> tuple[Tensor, ForwardBatch]:
    """Tokens [batch, q] and the forward batch verifying row i's tree after the ``start[i]`` positions of context that
    its cache slot, slot i, holds.

    Row i's node j is written at cache position start_i + j, at RoPE position start_i + depth;
    it sees the row's context and its own ancestors. Padding nodes (j >= len(tree)) see the row's
    context and themselves, so their attention stays well-defined; they are never committed.
    """
    bsz, q, start = len(trees), max(map(len, trees)), torch.tensor(start)
    if q == 1:  # every draft is empty: a plain decode step
        tokens = torch.stack([t.tokens for t in trees]).to(device)
        return tokens, causal_batch(torch.arange(bsz, device=device), start.to(device), 1)
    length = int(start.max()) + q
    tokens = torch.zeros(bsz, q, dtype=torch.long)
    input_pos = start[:, None] + torch.arange(q)[None, :]
    cache_pos = input_pos.clone()
    mask = torch.arange(length)[None, None, :] < start[:, None, None]  # [batch, 1, length]: the context
    mask = mask.expand(bsz, q, length).clone()
    mask[torch.arange(bsz)[:, None], torch.arange(q)[None, :], cache_pos] = True  # every node (padding included) sees itself
    for row, tree in enumerate(trees):
        n, s = len(tree), int(start[row])
        tokens[row, :n] = tree.tokens
        input_pos[row, :n] = s + tree.depth
        mask[row, :n, s : s + n] = tree.ancestor_mask()
    batch = ForwardBatch(
        torch.arange(bsz, device=device), input_pos.to(device), cache_pos.to(device), mask[:, None].to(device), slice(0, bsz)
    )
    return tokens.to(device), batch
