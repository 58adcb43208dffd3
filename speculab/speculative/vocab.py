"""A reduced draft vocabulary (FR-Spec): a drafter scores only the most frequent tokens.

Knows: the kept target token ids, the lm_head rows that score them (packed
like the target's linears on a CPU), how to map a draft index back to a target
token id, and how to spread a distribution over the kept tokens onto the whole
vocabulary (zero elsewhere), which is what verification needs to stay lossless
for sampled requests: the draft token was drawn from exactly that distribution.

Does not know: which drafter uses it, or how the ranking was made (``train/vocab.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from speculab.models.linear import inference_linear, native_kernels_for


class ReducedVocabulary:
    def __init__(self, token_ids: Tensor, rows: Tensor, vocab_size: int):
        """token_ids: [n] kept target ids; rows: [n, hidden] the lm_head's weight rows for them."""
        if token_ids.ndim != 1 or rows.shape[0] != token_ids.numel():
            raise ValueError(f"{token_ids.numel()} kept tokens but {rows.shape[0]} lm_head rows")
        if token_ids.numel() and (int(token_ids.min()) < 0 or int(token_ids.max()) >= vocab_size):
            raise ValueError(f"kept token ids must lie in [0, {vocab_size})")
        self.vocab_size = vocab_size
        self.token_ids = token_ids.to(rows.device)
        linear = nn.Linear(rows.shape[1], rows.shape[0], bias=False, device=rows.device, dtype=rows.dtype)
        linear.weight = nn.Parameter(rows, requires_grad=False)
        self.lm_head = inference_linear(linear, native_kernels_for(linear))

    @classmethod
    def of(cls, model, token_ids: Tensor) -> ReducedVocabulary:
        """The kept tokens [n] scored by ``model``'s own lm_head rows (any model with ``lm_head_rows``)."""
        token_ids = token_ids.to(model.norm.weight.device)
        return cls(token_ids, model.lm_head_rows(token_ids), model.config.vocab_size)

    def __len__(self) -> int:
        return self.token_ids.numel()

    def logits(self, hidden: Tensor) -> Tensor:
        """[..., n] draft logits over the kept tokens for hidden states [..., hidden]."""
        return self.lm_head(hidden)

    def to_target(self, index: Tensor) -> Tensor:
        """Target token ids for draft indices (any shape)."""
        return self.token_ids[index.to(self.token_ids.device)]

    def spread(self, probs: Tensor) -> Tensor:
        """[vocab] a distribution over the kept tokens [n] as one over the whole vocabulary."""
        full = torch.zeros(self.vocab_size, dtype=probs.dtype, device=probs.device)
        return full.index_copy_(0, self.token_ids.to(probs.device), probs)
