"""A drafter folder's token ranking: the file a reduced draft vocabulary (FR-Spec) is read from.

Knows: ``draft_vocab.safetensors`` beside a drafter (``token_ids`` [n] by falling frequency,
``counts`` [n]), writing it, and reading it back checked against the target's vocabulary.
Does not know: how the ranking is counted (``train/vocab.py``) or how a proposer uses it
(``speculative/vocab.py``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from speculab.models.loading import CheckpointError

RANKING_FILE = "draft_vocab.safetensors"  # optional: token ids by falling frequency (speculab.train.vocab)


def load_token_ranking(folder: str | Path, vocab_size: int) -> Tensor:
    """The head folder's token ranking ``token_ids`` [n]; a clear error when absent or out of range."""
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


def save_ranking(folder: Path, token_ids: torch.Tensor, counts: torch.Tensor) -> Path:
    path = Path(folder) / RANKING_FILE
    save_file({"token_ids": token_ids.contiguous(), "counts": counts.contiguous()}, path)
    return path
