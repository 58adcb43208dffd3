"""Train an EAGLE-1/2 head for a target, with the reference recipe, on self-distilled data.

Knows: the head's inputs and targets (features f_0..f_{n-2} with tokens
x_1..x_{n-1} predict f_1..f_{n-1}), the loss (1.0 · SmoothL1 on the features
+ 0.1 · soft cross-entropy between the target's and the head's next-token
distributions through the frozen lm_head), the uniform feature noise (±0.1 at
512 tokens, scaled by 512/length as in the reference code), batching by a cap on
tokens, and writing the head in the published EAGLE layout (``config.json``
with ``bias: true``, ``model.safetensors`` with ``fc.*`` and ``layers.0.*``)
so that speculab and the EAGLE reference code both load it.

Does not know: where the data comes from (``distill_data.py``) or the loop (``loop.py``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor

from speculab.models.eagle_head import EagleHead
from speculab.models.kv_cache import KVCache
from speculab.models.llama import Transformer, causal_batch

FEATURE_WEIGHT, TOKEN_WEIGHT = 1.0, 0.1  # the reference's v_w and p_w
NOISE_AT_512 = 0.2  # uniform noise of width 0.2 (±0.1) at 512 tokens
# The soft cross-entropy needs two vocab-sized matmuls per position; on a CPU they cost most of a step.
# Taking it on a random share of the positions (the feature loss keeps all of them) buys ~3x more steps.
TOKEN_LOSS_SHARE = 0.25


@dataclass(frozen=True)
class HeadBatch:
    tokens: Tensor  # [batch, q] x_{t+1}
    features: Tensor  # [batch, q, hidden] f_t
    targets: Tensor  # [batch, q, hidden] f_{t+1}
    valid: Tensor  # [batch, q] bool, False on padding


def new_head(target: Transformer, seed: int = 0, init_std: float = 0.02) -> EagleHead:
    """A randomly initialised fp32 head for ``target`` (fc with bias, the target's embedding)."""
    torch.manual_seed(seed)
    head = EagleHead(dataclasses.replace(target.config, num_layers=1), fc_bias=True, own_embedding=False)
    for name, p in head.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=init_std)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)
    return head.float()


def make_batch(items: list[tuple]) -> HeadBatch:
    """items: (token ids [n], features [n-1, hidden][, answer start, unused here]) per sequence."""
    q = max(len(ids) - 2 for ids, *_ in items)
    hidden = items[0][1].shape[-1]
    tokens = torch.zeros(len(items), q, dtype=torch.long)
    features = torch.zeros(len(items), q, hidden)
    targets = torch.zeros(len(items), q, hidden)
    valid = torch.zeros(len(items), q, dtype=torch.bool)
    for i, (ids, feats, *_) in enumerate(items):
        n = len(ids) - 2
        tokens[i, :n] = torch.tensor(ids[1 : n + 1])
        features[i, :n] = feats[:n]
        targets[i, :n] = feats[1 : n + 1]
        valid[i, :n] = True
    return HeadBatch(tokens, features, targets, valid)


def head_loss(
    head: EagleHead, target: Transformer, batch: HeadBatch, noise: bool = True, token_loss_share: float = TOKEN_LOSS_SHARE
) -> tuple[Tensor, dict]:
    bsz, q = batch.tokens.shape
    features = batch.features
    if noise:
        features = features + (torch.rand_like(features) - 0.5) * NOISE_AT_512 * 512 / q
    cache = KVCache(1, bsz, head.config.num_kv_heads, head.config.head_dim, q, torch.float32, features.device)
    fwd = causal_batch(torch.arange(bsz), torch.zeros(bsz, dtype=torch.long), q)
    predicted = head.hidden(target, batch.tokens, features, fwd, cache)
    valid = batch.valid
    feature_loss = F.smooth_l1_loss(predicted[valid], batch.targets[valid])
    picked = valid & (torch.rand(valid.shape) < token_loss_share) if token_loss_share < 1 else valid
    if not picked.any():
        picked = valid
    with torch.no_grad():
        target_logits = target.lm_head(batch.targets[picked])
        target_p = target_logits.softmax(-1)
    head_logp = target.lm_head(predicted[picked]).float().log_softmax(-1)
    token_loss = -(target_p * head_logp).sum(-1).mean()
    with torch.no_grad():
        top1 = (head_logp.argmax(-1) == target_logits.argmax(-1)).float().mean()
    loss = FEATURE_WEIGHT * feature_loss + TOKEN_WEIGHT * token_loss
    return loss, {"feature_loss": feature_loss.detach(), "token_loss": token_loss.detach(), "top1": top1}


def head_config(target_raw: dict) -> dict:
    """The published head config: the target's, one layer, ``bias: true``."""
    keep = (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "rms_norm_eps",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "max_position_embeddings",
        "head_dim",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "hidden_act",
    )
    config = {k: target_raw[k] for k in keep if k in target_raw}
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None:  # readers that predate rope_parameters (the EAGLE reference code) read rope_theta
        config["rope_theta"] = theta
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "bias": True,
        "num_hidden_layers": 1,
        **config,
        "torch_dtype": "bfloat16",
    }


def published_state(head: EagleHead) -> dict[str, Tensor]:
    """The head's tensors under the reference's names (fused projections split back)."""
    c = head.config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    layer = head.layer
    wq, wk, wv = layer.self_attn.qkv_proj.weight.split([q, kv, kv])
    gate, up = layer.mlp.gate_up_proj.weight.chunk(2)
    state = {
        "fc.weight": head.fc.weight,
        "fc.bias": head.fc.bias,
        "layers.0.self_attn.q_proj.weight": wq,
        "layers.0.self_attn.k_proj.weight": wk,
        "layers.0.self_attn.v_proj.weight": wv,
        "layers.0.self_attn.o_proj.weight": layer.self_attn.o_proj.weight,
        "layers.0.mlp.gate_proj.weight": gate,
        "layers.0.mlp.up_proj.weight": up,
        "layers.0.mlp.down_proj.weight": layer.mlp.down_proj.weight,
        "layers.0.post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
    }
    return state


def save_head(head: EagleHead, target_raw: dict, out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous() for k, v in published_state(head).items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = head_config(target_raw) | {"torch_dtype": str(dtype).removeprefix("torch.")}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out / "model.safetensors"
