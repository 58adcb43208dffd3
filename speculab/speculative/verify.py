"""Verification: which draft tokens the target accepts, and the token it adds after them.

Terms (as in vLLM): *draft* tokens are proposed; *accepted* tokens are the
draft tokens on the path the target keeps; after the last accepted node the
target adds one token of its own: the *bonus* token when that node has no
children left to try (every draft on the path accepted), the *recovered* token
when its children were all rejected (drawn from the residual distribution).
Every verify step therefore emits accepted + 1 tokens.

Greedy: follow the tree from the root, at each node stepping to the child
whose token is the target's argmax there (the longest such path when a parent
has two children with the same token); the bonus is the argmax after the last
accepted node (recovered where the node has children).

Sampled (lossless): at each node with target distribution p, try its children
in order. A child x drawn from draft distribution q is accepted with
probability min(1, p(x) / q(x)); on rejection p becomes norm(max(p - q, 0))
before the next child is tried (Leviathan/Chen for a chain; recursive
rejection, SpecInfer/EAGLE style, for siblings). Deterministic drafts (top-k,
n-gram) have q = a point mass on x: accept with p(x), else zero p(x). When no
child is accepted, the recovered token is sampled from what is left of p.

Coupled (drafter-invariant, a sampled request with position-keyed noise): the
target's token after each node is the exponential race's argmax p(v) / E_t(v)
with the noise of that token's output position; the kept path is the greedy
one over those tokens. The output is then plain sampling's under the same noise,
token for token, whatever was drafted. For deterministic drafts each child is
accepted with probability p(x), as under rejection; a sampled draft is accepted
at least (1 - TV) / (1 + TV) of the time, against rejection's 1 - TV.

Does not know: models or caches; it maps (tree, target distributions) to a path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from speculab.sampling import greedy_tokens
from speculab.speculative.tree import VerifyTree


@dataclass(frozen=True)
class Verdict:
    accepted: list[int]  # node indices of the kept path, root (0) first
    next_token: int  # the target's token after the last accepted node
    recovered: bool  # True: that node's children were rejected (the recovered token); False: the bonus token

    @property
    def num_accepted(self) -> int:
        """Accepted draft tokens (the root is not a draft token)."""
        return len(self.accepted) - 1


def verify_greedy(tree: VerifyTree, target_logits: Tensor) -> Verdict:
    """target_logits: [n, vocab], row i = the target's logits after node i."""
    argmax = greedy_tokens(target_logits)
    tokens = tree.tokens.tolist()
    children = tree.children()

    def longest(node: int) -> list[int]:
        best: list[int] = []
        for child in children[node]:
            if tokens[child] == argmax[node]:
                path = longest(child)
                if len(path) + 1 > len(best):
                    best = [child, *path]
        return best

    path = [0, *longest(0)]
    return Verdict(path, argmax[path[-1]], recovered=bool(children[path[-1]]))


def verify_coupled(tree: VerifyTree, target_probs: Tensor, noise: Tensor) -> Verdict:
    """Coupled (drafter-invariant): greedy verification of the exponential race's scores, so a node is accepted
    exactly when its token is what plain sampling under the same position-keyed noise emits there
    (``position_noise.py``).

    target_probs: [n, vocab] fp32, row i = the target's distribution after node i; noise: [n, vocab], row i = E_t at
    the output position of the token after node i.
    """
    return verify_greedy(tree, target_probs / noise)


def verify_by_rejection(tree: VerifyTree, target_probs: Tensor, generator: torch.Generator | None) -> Verdict:
    """target_probs: [n, vocab] fp32, row i = the target's distribution after node i."""
    tokens = tree.tokens.tolist()
    children = tree.children()
    node, path = 0, [0]
    while True:
        p = target_probs[node].clone()
        accepted_child = None
        for child in children[node]:
            x = tokens[child]
            q = tree.draft_probs[child - 1] if tree.draft_probs is not None else None
            q_x = 1.0 if q is None else float(q[x])
            if q_x > 0 and float(torch.rand((), generator=generator)) * q_x < float(p[x]):
                accepted_child = child
                break
            # Rejected: remove this proposal's mass from p (recovered distribution).
            if q is None:
                p[x] = 0.0
            else:
                p = (p - q).clamp_(min=0.0)
            total = p.sum()
            if total <= 0:  # p was entirely covered by q: numerically, fall back to the target
                p = target_probs[node].clone()
            else:
                p /= total
        if accepted_child is None:  # every child rejected, or none to try
            return Verdict(path, int(torch.multinomial(p, 1, generator=generator)), recovered=bool(children[node]))
        path.append(accepted_child)
        node = accepted_child
        if not children[node]:
            return Verdict(path, int(torch.multinomial(target_probs[node], 1, generator=generator)), recovered=False)
