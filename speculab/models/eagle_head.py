"""EAGLE-1/2 draft heads: one decoder layer fed the target's features.

Knows: the published checkpoint layout, loaded as it is (config.json plus
``pytorch_model.bin`` or ``model.safetensors``; keys ``fc.weight``,
``fc.bias`` when config ``bias`` says so (absent key = true, as in the
reference), ``layers.0.*`` without ``input_layernorm``, optional
``embed_tokens.weight``), and one head step: ``h = layer(fc(cat(embed(token),
feature)))``, whose logits come from the target's lm_head. The head reuses
the target model file's attention and MLP, so its KV cache, positions and tree
masks work exactly like the target's.

Where its linears are native, its layer runs in the C++ loop (``native_layers.py``, no input RMSNorm).

Does not know: how drafts are grown into a tree (``speculative/eagle.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor, nn

from speculab.models.config import ModelConfig
from speculab.models.kv_cache import KVCache
from speculab.models.linear import native_kernels_for, prepack_linears
from speculab.models.llama import Block, ForwardBatch, Transformer, attention_mask, rope_inv_freq, rope_tables
from speculab.models.loading import CheckpointError, iter_tensors
from speculab.models.native_layers import NativeLayers


class EagleHead(nn.Module):
    def __init__(self, config: ModelConfig, fc_bias: bool, own_embedding: bool):
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=fc_bias)
        self.layer = Block(config)
        self.layer.input_layernorm = nn.Identity()  # EAGLE's layer 0 has none
        self.embed_tokens = nn.Embedding(config.vocab_size, h) if own_embedding else None
        self.register_buffer("inv_freq", rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling), persistent=False)
        self.native_layers: NativeLayers | None = None  # the layer in C++ (native_layers.py), set by the loader when it applies

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        c, w = self.config, self.layer.post_attention_layernorm.weight  # fc may be prepacked: no .weight
        return KVCache(1, num_slots, c.num_kv_heads, c.head_dim, max_len, w.dtype, w.device)

    def cache_bytes(self, num_slots: int, max_len: int) -> int:
        """The bytes ``new_cache(num_slots, max_len)`` holds once written."""
        c, w = self.config, self.layer.post_attention_layernorm.weight
        return KVCache.nbytes_for(1, num_slots, c.num_kv_heads, c.head_dim, max_len, w.dtype)

    def forward(  # differentiable: the trainer calls it with a fresh cache; loaded heads have no grads
        self,
        target: Transformer,
        tokens: Tensor,  # [batch, q] the token after each feature's position
        features: Tensor,  # [batch, q, hidden] target features (or the head's own previous outputs)
        batch: ForwardBatch,
        cache: KVCache,
    ) -> tuple[Tensor, Tensor]:
        """Returns (logits [batch, q, vocab] through the target's lm_head, hidden [batch, q, hidden])."""
        hidden = self.hidden(target, tokens, features, batch, cache)
        return self.logits(target, hidden), hidden

    def logits(self, target: Transformer, hidden: Tensor) -> Tensor:
        """[..., vocab] through the target's lm_head."""
        return target.lm_head(hidden.to(target.dtype))

    def hidden(self, target: Transformer, tokens: Tensor, features: Tensor, batch: ForwardBatch, cache: KVCache) -> Tensor:
        """The head's output features [batch, q, hidden], before the lm_head."""
        embed = self.embed_tokens if self.embed_tokens is not None else target.embed_tokens
        dtype = self.layer.post_attention_layernorm.weight.dtype
        x = self.fc(torch.cat([embed(tokens).to(dtype), features.to(dtype)], dim=-1))
        batch.prepare(self.config)
        cos, sin = rope_tables(batch.input_pos, self.inv_freq, dtype)
        mask = attention_mask(batch.mask, self.config.num_heads // self.config.num_kv_heads, dtype)
        if self.native_layers is not None:
            return self.native_layers(x.contiguous(), batch, cache, cos, sin, mask, ())[0]
        return self.layer(x, cache.layer(0), batch, cos, sin, mask)


def read_head_config(folder: Path) -> tuple[dict, ModelConfig, Path]:
    """An EAGLE head's config.json: the raw dict, the one-layer ModelConfig, and its path."""
    config_path = folder / "config.json"
    if not config_path.exists():
        raise CheckpointError(f"{folder}: no config.json for the EAGLE head")
    raw = json.loads(config_path.read_text())
    raw.setdefault("model_type", "llama")
    raw.setdefault("num_hidden_layers", 1)
    return raw, ModelConfig.from_hf_dict(raw, source=str(config_path)), config_path


def read_head_tensors(folder: Path, shapes: dict[str, tuple[int, ...]], optional: dict[str, tuple[int, ...]]) -> dict[str, Tensor]:
    """The head's tensors (model.safetensors, else pytorch_model.bin), checked against ``shapes`` (required)
    and ``optional``; anything else in the file is ignored."""
    files = [folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).exists()][:1]
    if not files:
        raise CheckpointError(f"{folder}: no model.safetensors or pytorch_model.bin")
    tensors = {name: t for _, name, t in iter_tensors(files)}
    expected = shapes | {name: shape for name, shape in optional.items() if name in tensors}
    for name, shape in expected.items():
        if name not in tensors:
            raise CheckpointError(f"{files[0]}: tensor {name!r} is missing")
        if tuple(tensors[name].shape) != shape:
            raise CheckpointError(f"{files[0]}: tensor {name!r} has shape {tuple(tensors[name].shape)}, expected {shape}")
    return {name: tensors[name] for name in expected}


def load_eagle_head(folder: str | Path, target: Transformer, dtype: torch.dtype | None = None, prepack: bool = True) -> EagleHead:
    """Load an EAGLE-1/2 head folder for ``target``; shapes are checked against the target."""
    folder = Path(folder)
    raw, config, config_path = read_head_config(folder)
    if config.vocab_size != target.config.vocab_size or config.hidden_size != target.config.hidden_size:
        raise CheckpointError(
            f"{config_path}: head has vocab {config.vocab_size} / hidden {config.hidden_size}, "
            f"target has {target.config.vocab_size} / {target.config.hidden_size}"
        )
    h, d = config.hidden_size, config.head_dim
    q, kv, inter = config.num_heads * d, config.num_kv_heads * d, config.intermediate_size
    shapes = {
        "fc.weight": (h, 2 * h),
        "layers.0.self_attn.q_proj.weight": (q, h),
        "layers.0.self_attn.k_proj.weight": (kv, h),
        "layers.0.self_attn.v_proj.weight": (kv, h),
        "layers.0.self_attn.o_proj.weight": (h, q),
        "layers.0.mlp.gate_proj.weight": (inter, h),
        "layers.0.mlp.up_proj.weight": (inter, h),
        "layers.0.mlp.down_proj.weight": (h, inter),
        "layers.0.post_attention_layernorm.weight": (h,),
    }
    fc_bias = raw.get("bias", True)  # an absent key means a bias, as in the reference
    if fc_bias:
        shapes["fc.bias"] = (h,)
    tensors = read_head_tensors(folder, shapes, {"embed_tokens.weight": (config.vocab_size, h)})
    dtype = dtype or target.dtype
    t = {k: v.to(dtype) for k, v in tensors.items()}
    p = "layers.0."
    state = {
        "fc.weight": t["fc.weight"],
        "layer.self_attn.qkv_proj.weight": torch.cat([t[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]),
        "layer.self_attn.o_proj.weight": t[p + "self_attn.o_proj.weight"],
        "layer.mlp.gate_up_proj.weight": torch.cat([t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"]]),
        "layer.mlp.down_proj.weight": t[p + "mlp.down_proj.weight"],
        "layer.post_attention_layernorm.weight": t[p + "post_attention_layernorm.weight"],
    }
    if fc_bias:
        state["fc.bias"] = t["fc.bias"]
    if "embed_tokens.weight" in t:
        state["embed_tokens.weight"] = t["embed_tokens.weight"]
    with torch.device("meta"):
        head = EagleHead(config, fc_bias, "embed_tokens.weight" in t)
    head.load_state_dict(state, assign=True, strict=True)
    head.inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
    device = target.norm.weight.device
    head = head.to(device).eval().requires_grad_(False)
    if prepack:  # inference only: the packed linears have no .weight to train or inspect
        prepack_linears(head, native_kernels_for(head))  # like the target's linears (models/linear.py)
        # Its layer in the C++ loop where the linears are native: a head step is mostly per-op overhead in Python
        # (1.60 -> 1.16 ms over 8 frontier nodes with the 4,096-token vocabulary, benchmarks/drafters.py cost).
        head.native_layers = NativeLayers.of_blocks([head.layer], config, input_norm=False)
    return head
