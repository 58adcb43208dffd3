"""Draft trees: what a proposer hands the verifier.

Knows: a draft as its tokens and the parent index of each node (``-1`` = the
root, i.e. the last token already emitted but not yet in the target's cache).
A chain is the tree where node i's parent is i-1. From the parents it derives
depths, the ancestor (attention) mask and the root-to-leaf paths. A parent
always precedes its children; that is checked, not assumed.

Does not know: models, scores or how the tree was grown (that is each proposer's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


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
