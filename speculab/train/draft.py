"""Distil a small Llama-family draft model from a target (KL to the target's distributions).

Knows: the draft's shape (a few narrow layers, tied embeddings, the target's
tokenizer, RoPE and vocabulary), its initialisation (the embedding table is the
target's projected on its principal directions: the draft starts knowing which
tokens are alike), the loss (KL(target ‖ draft) at every position, the target's
distribution read from its recorded features through its lm_head, over the
whole vocabulary or over the frequent tokens plus drawn negatives), and saving
an HF-layout checkpoint with the target's tokenizer files so any engine loads it.

Trains with transformers' ``LlamaForCausalLM`` (the draft is an ordinary HF
model), which the ``train`` extra installs. Does not know: the loop or the data.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "generation_config.json")


@dataclass(frozen=True)
class DraftBatch:
    tokens: Tensor  # [batch, q] x_0..x_{n-2}
    features: Tensor  # [batch, q, target_hidden] target state after each token: its next-token distribution
    valid: Tensor  # [batch, q] bool


def draft_config(target_raw: dict, hidden_size: int, layers: int, intermediate_size: int, head_dim: int = 64) -> dict:
    keep = (
        "vocab_size",
        "rms_norm_eps",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "max_position_embeddings",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "hidden_act",
    )
    heads = max(1, hidden_size // head_dim)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **{k: target_raw[k] for k in keep if k in target_raw},
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 1,
        "head_dim": head_dim,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
    }


def new_draft(target_raw: dict, target_embedding: Tensor, hidden_size: int, layers: int, intermediate_size: int, seed: int = 0):
    """target_embedding: [vocab, target_hidden]. Returns an fp32 transformers LlamaForCausalLM."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**draft_config(target_raw, hidden_size, layers, intermediate_size))
    model = transformers.LlamaForCausalLM(config).float()
    with torch.no_grad():
        emb = target_embedding.float()
        centred = emb - emb.mean(0, keepdim=True)
        _, _, v = torch.linalg.svd(centred[:: max(1, len(emb) // 16384)], full_matrices=False)  # rows subsampled: cheap
        projected = centred @ v[:hidden_size].T  # [vocab, hidden]
        projected *= 0.02 * hidden_size**0.5 / projected.norm(dim=-1).mean()
        model.get_input_embeddings().weight.copy_(projected)
    return model


def make_batch(items: list[tuple]) -> DraftBatch:
    q = max(len(ids) - 1 for ids, *_ in items)
    hidden = items[0][1].shape[-1]
    tokens = torch.zeros(len(items), q, dtype=torch.long)
    features = torch.zeros(len(items), q, hidden)
    valid = torch.zeros(len(items), q, dtype=torch.bool)
    for i, (ids, feats, *_) in enumerate(items):
        n = len(ids) - 1
        tokens[i, :n] = torch.tensor(ids[:n])
        features[i, :n] = feats[:n]
        valid[i, :n] = True
    return DraftBatch(tokens, features, valid)


def loss_rows(vocab: Tensor, vocab_size: int, negatives: int, generator: torch.Generator | None = None) -> Tensor:
    """The output rows one step's loss covers: ``vocab`` [n] plus ``negatives`` other tokens drawn afresh.

    Scoring only the frequent tokens makes a step several times cheaper on a CPU (the vocab-sized
    matmuls and softmaxes are most of it). The drawn negatives keep the rest of the output rows low, so
    the saved model still drafts well over its whole vocabulary, as any engine would run it.
    """
    outside = torch.ones(vocab_size, dtype=torch.bool)
    outside[vocab] = False
    others = outside.nonzero()[:, 0]
    drawn = others[torch.randperm(others.numel(), generator=generator)[:negatives]]
    return torch.cat([vocab, drawn])


def draft_loss(draft, target, batch: DraftBatch, rows: Tensor | None = None) -> tuple[Tensor, dict]:
    """KL(target ‖ draft) at every valid position, over the output ``rows`` [n] (None: the whole vocabulary).

    ``target``: the frozen target (a speculab ``Transformer``), read through its lm_head.
    """
    features = batch.features[batch.valid]  # [tokens, target_hidden]
    hidden = draft.model(input_ids=batch.tokens).last_hidden_state[batch.valid]  # [tokens, hidden]
    with torch.no_grad():
        if rows is None:
            target_logits = target.lm_head(features).float()
        else:
            target_logits = features @ target.lm_head_rows(rows).float().T  # [tokens, rows]
        target_logp = target_logits.log_softmax(-1)
    weight = draft.lm_head.weight if rows is None else draft.lm_head.weight[rows]
    logp = (hidden @ weight.T).float().log_softmax(-1)
    kl = F.kl_div(logp, target_logp, log_target=True, reduction="batchmean")
    with torch.no_grad():
        top1 = (logp.argmax(-1) == target_logp.argmax(-1)).float().mean()
        # the expected acceptance of a sampled draft token: sum_x min(p, q)
        overlap = torch.minimum(logp.exp(), target_logp.exp()).sum(-1).mean()
    return kl, {"kl": kl.detach(), "top1": top1, "overlap": overlap}


def save_draft(draft, target_folder: Path, out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    draft.to(dtype).save_pretrained(out, safe_serialization=True)
    draft.float()
    for name in TOKENIZER_FILES:
        if (target_folder / name).exists():
            shutil.copy(target_folder / name, out / name)
    config = json.loads((out / "config.json").read_text())
    config.pop("_name_or_path", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out / "model.safetensors"
