"""A reduced draft vocabulary (FR-Spec): the ranking file a drafter ships, and a drafter's lm_head reduced by it.

A drafter that scores only the most frequent tokens pays a fraction of the full lm_head per draft step (on
SmolLM2 the 49k-row lm_head is most of an EAGLE step). Verification still uses the target's full distribution,
so the output is unchanged; a token outside the kept set simply cannot be drafted.

Knows: ``draft_vocab.safetensors`` beside a drafter (``token_ids`` [n] by falling frequency, ``counts`` [n]),
writing it and reading it back checked against the target's vocabulary; and ``ReducedVocabulary``: the kept
target token ids, the lm_head rows that score them (packed like the target's linears on a CPU), how to map a
draft index back to a target token id, and how to spread a distribution over the kept tokens onto the whole
vocabulary (zero elsewhere), which is what verification needs to stay lossless for sampled requests: the draft
token was drawn from exactly that distribution.

Does not know: how the tokens are counted (``train/vocab.py``, at training time) or which drafter uses it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from speculab.models.linear import inference_linear, native_kernels_for
from speculab.models.loading import CheckpointError

RANKING_FILE = "draft_vocab.safetensors"  # optional beside a drafter: token ids by falling frequency


def load_token_ranking(folder: str | Path, vocab_size: int) -> Tensor:
    """The drafter folder's token ranking ``token_ids`` [n]; a clear error when absent or out of range."""
    path = Path(folder) / RANKING_FILE
    if not path.exists():
        raise CheckpointError(
            f"{path}: no token ranking for a reduced draft vocabulary; "
            "make one with `speculab train vocab --out FOLDER` or leave draft_vocab unset"
        )
    ids = load_file(path).get("token_ids")
    if ids is None or ids.dim() != 1 or ids.numel() == 0:
        raise CheckpointError(f"{path}: tensor 'token_ids' missing or not a non-empty 1-D tensor")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size or ids.unique().numel() != ids.numel():
        raise CheckpointError(f"{path}: 'token_ids' must be distinct ids below the target's vocab_size {vocab_size}")
    return ids.long()


def save_ranking(folder: Path, token_ids: Tensor, counts: Tensor) -> Path:
    path = Path(folder) / RANKING_FILE
    save_file({"token_ids": token_ids.contiguous(), "counts": counts.contiguous()}, path)
    return path


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
