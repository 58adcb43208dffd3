"""Loading a method's drafter for a loaded target: a draft model, an EAGLE-1 head or an EAGLE-3 head, with its reduced
draft vocabulary.

Terms: a *draft vocabulary* is the set of tokens a drafter may propose; a method's ``draft_vocab`` parameter says how
many of the most frequent ones (``auto``: the method's default where the drafter ships a token ranking; None: all);
``draft_vocab_size`` is that count; ``kept_token_ids`` [n] the target token ids kept, what a proposer and an EAGLE-3
loader take.

Knows: the drafter folders' files (config.json, the ranking beside it) and each builder's options. Does not know:
which method uses which builder (``methods.METHODS``) or what a draft costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import speculab.models.eagle3_head as e3
import speculab.models.eagle_head as e2
from speculab.models.draft_vocab import RANKING_FILE, load_token_ranking
from speculab.models.loading import load_model
from speculab.models.tokenizer import Tokenizer
from speculab.runtime import DTYPES


def load_draft_model(path: str | Path, loaded):
    """A draft model for the loaded target, in its dtype, KV cache dtype and device; it must share the target's tokenizer."""
    if Tokenizer(path)._tok.get_vocab() != loaded.tokenizer._tok.get_vocab():
        raise ValueError(f"{path}: the draft model's tokenizer differs from the target's; they must share one")
    model = load_model(path, DTYPES[loaded.dtype], loaded.device)
    model.kv_dtype = loaded.model.kv_dtype  # one KV dtype for both caches (the memory estimate's assumption)
    return model


def draft_vocab_size(params: dict, folder: Path, auto: int | None) -> int | None:
    """Tokens a drafter drafts over: the spec's ``draft_vocab``; ``auto`` is the method's ``auto`` where the drafter
    ships a token ranking, and the whole vocabulary (an EAGLE-3 head's own; None) elsewhere."""
    size = params.get("draft_vocab")
    if size == "auto":
        return auto if (Path(folder) / RANKING_FILE).exists() else None
    return size


def kept_token_ids(folder: Path, loaded, size: int | None) -> dict:
    """``{"kept_token_ids": [size]}``: the drafter folder's ``size`` most frequent tokens; {} for None."""
    return {} if size is None else {"kept_token_ids": load_token_ranking(folder, loaded.model.config.vocab_size)[:size]}


def existing(path: str | Path, key: str) -> Path:
    """The drafter folder named by the spec's ``key`` parameter; a clear error saying how to make one when it is not one."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise ValueError(
            f"{key}={path}: no checkpoint there (config.json missing); "
            f"train one with `speculab train {'eagle' if 'eagle' in key else 'draft'}` or pass {key}=PATH"
        )
    return path


def draft_model_options(params: dict, loaded, auto_vocab: int | None) -> dict[str, Any]:
    folder = existing(params["draft"], "draft")
    return {
        "model": load_draft_model(folder, loaded),
        "num_speculative_tokens": params["num_speculative_tokens"],
        **kept_token_ids(folder, loaded, draft_vocab_size(params, folder, auto_vocab)),
    }


def eagle_options(params: dict, loaded, auto_vocab: int | None, *, eagle3: bool) -> dict[str, Any]:
    """An EAGLE proposer's options; an EAGLE-3 head's own vocabulary is cut as it loads (the proposer gets no ids)."""
    folder = existing(params["eagle"], "eagle")
    kept = kept_token_ids(folder, loaded, draft_vocab_size(params, folder, auto_vocab))
    if eagle3:
        head, kept = e3.load_eagle3_head(folder, loaded.model, **kept), {}
    else:
        head = e2.load_eagle_head(folder, loaded.model)
    tree = {k: params[k] for k in ("num_steps", "topk", "num_draft_tokens")}
    return {"head": head, "target": loaded.model, **tree} | kept
