"""EAGLE-3 draft heads: features from three target layers, a reduced draft vocabulary.

Knows: the published layout (config.json with ``draft_vocab_size`` and
optionally ``target_hidden_size``; keys ``fc.weight`` [H, 3·H_target] without
bias, ``midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}``,
``midlayer.self_attn.*`` whose q/k/v take 2H inputs, ``midlayer.mlp.*``,
``norm.weight``, the head's own ``lm_head.weight`` [draft_vocab_size, H], ``d2t``
(target id = draft id + d2t[draft id]) and ``t2d``), which target layers feed
it (the hidden states entering layers 2, N//2 and N-3), and one step:
``x = cat(input_layernorm(embed(token)), hidden_norm(h))``, attention with
``h`` as the residual, the MLP residual, then ``lm_head(norm(h'))``. The
pre-norm ``h'`` feeds the next step; fc applies only to the target's 3H-wide
features. Loading may cut the head's vocabulary to the rows of given tokens
(``kept_token_ids``: the most frequent ones), a cheaper step.

Does not know: tree growth (shared with EAGLE-2 in ``speculative/eagle.py``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from speculab.models.config import ModelConfig
from speculab.models.eagle_head import read_head_config, read_head_tensors
from speculab.models.kv_cache import KVCache
from speculab.models.linear import native_kernels_for, prepack_linears
from speculab.models.llama import MLP, Attention, ForwardBatch, RMSNorm, Transformer, attention_mask, rope_inv_freq, rope_tables
from speculab.models.loading import CheckpointError


def eagle3_feature_layers(num_layers: int) -> tuple[int, int, int]:
    return (2, num_layers // 2, num_layers - 3)


class Eagle3Head(nn.Module):
    def __init__(self, config: ModelConfig, target_hidden: int, draft_vocab_size: int):
        super().__init__()
        self.config = config
        h, d = config.hidden_size, config.head_dim
        self.fc = nn.Linear(3 * target_hidden, h, bias=False)
        self.hidden_norm = RMSNorm(h, config.rms_norm_eps)
        self.input_layernorm = RMSNorm(h, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, config.rms_norm_eps)
        self.self_attn = Attention(config, input_size=2 * h)
        self.mlp = MLP(config)
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab_size, dtype=torch.long))
        self.register_buffer("inv_freq", rope_inv_freq(d, config.rope_theta, config.rope_scaling), persistent=False)
        self.target_hidden = target_hidden

    def feature_layers(self, target: Transformer) -> tuple[int, int, int]:
        return eagle3_feature_layers(target.config.num_layers)

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        c, w = self.config, self.norm.weight  # fc may be prepacked: no .weight
        return KVCache(1, num_slots, c.num_kv_heads, c.head_dim, max_len, w.dtype, w.device)

    def cache_bytes(self, num_slots: int, max_len: int) -> int:
        """The bytes ``new_cache(num_slots, max_len)`` holds once written."""
        c, w = self.config, self.norm.weight
        return KVCache.nbytes_for(1, num_slots, c.num_kv_heads, c.head_dim, max_len, w.dtype)

    def map_tokens(self, draft_ids: Tensor) -> Tensor:
        """Draft-vocabulary ids to target ids."""
        return draft_ids + self.d2t[draft_ids]

    def forward(self, target: Transformer, tokens: Tensor, features: Tensor, batch: ForwardBatch, cache: KVCache) -> tuple[Tensor, Tensor]:
        """tokens [batch, q]; features [batch, q, 3*H_target] from the target or [batch, q, H] from this head.
        Returns (logits over the draft vocabulary [batch, q, draft_vocab_size], pre-norm hidden [batch, q, H]).
        Differentiable: the EAGLE-3 trainer calls it; a loaded head has no grads, so no graph is built."""
        h = self.hidden(target, tokens, features, batch, cache)
        return self.logits(target, h), h

    def logits(self, target: Transformer, hidden: Tensor) -> Tensor:
        """[..., draft_vocab_size] from the head's pre-norm hidden states."""
        return self.lm_head(self.norm(hidden))

    def hidden(self, target: Transformer, tokens: Tensor, features: Tensor, batch: ForwardBatch, cache: KVCache) -> Tensor:
        """The head's pre-norm hidden states [batch, q, H]."""
        dtype = self.norm.weight.dtype
        h = self.fc(features.to(dtype)) if features.shape[-1] == 3 * self.target_hidden else features.to(dtype)
        x = torch.cat([self.input_layernorm(target.embed_tokens(tokens).to(dtype)), self.hidden_norm(h)], dim=-1)
        batch.prepare(self.config)
        cos, sin = rope_tables(batch.input_pos, self.inv_freq, dtype)
        mask = attention_mask(batch.mask, self.config.num_heads // self.config.num_kv_heads, dtype)
        h = h + self.self_attn(x, cache.layer(0), batch, cos, sin, mask)  # the residual is h, not x
        return h + self.mlp(self.post_attention_layernorm(h))


def load_eagle3_head(
    folder: str | Path,
    target: Transformer,
    dtype: torch.dtype | None = None,
    prepack: bool = True,
    kept_token_ids: Tensor | None = None,
) -> Eagle3Head:
    """Load an EAGLE-3 head folder for ``target``; shapes are checked against its config and the target.

    ``kept_token_ids``: [n] target token ids (FR-Spec: the most frequent ones): the head keeps only the rows of its
    own vocabulary for those tokens, a cheaper draft step (its lm_head is most of it). None: all its rows."""
    folder = Path(folder)
    raw, config, config_path = read_head_config(folder)
    target_hidden = raw.get("target_hidden_size") or target.config.hidden_size
    rows = raw.get("draft_vocab_size") or config.vocab_size
    if config.vocab_size != target.config.vocab_size or target_hidden != target.config.hidden_size:
        raise CheckpointError(
            f"{config_path}: head expects vocab {config.vocab_size} / target hidden {target_hidden}, "
            f"target has {target.config.vocab_size} / {target.config.hidden_size}"
        )
    h, d, inter = config.hidden_size, config.head_dim, config.intermediate_size
    q, kv = config.num_heads * d, config.num_kv_heads * d
    m = "midlayer."
    shapes = {
        "fc.weight": (h, 3 * target_hidden),
        "norm.weight": (h,),
        "lm_head.weight": (rows, h),
        "d2t": (rows,),
        "t2d": (config.vocab_size,),
        m + "hidden_norm.weight": (h,),
        m + "input_layernorm.weight": (h,),
        m + "post_attention_layernorm.weight": (h,),
        m + "self_attn.q_proj.weight": (q, 2 * h),
        m + "self_attn.k_proj.weight": (kv, 2 * h),
        m + "self_attn.v_proj.weight": (kv, 2 * h),
        m + "self_attn.o_proj.weight": (h, q),
        m + "mlp.gate_proj.weight": (inter, h),
        m + "mlp.up_proj.weight": (inter, h),
        m + "mlp.down_proj.weight": (h, inter),
    }
    t = read_head_tensors(folder, shapes, {})
    dtype = dtype or target.dtype
    w = {k: (v if k in ("d2t", "t2d") else v.to(dtype)) for k, v in t.items()}
    state = {
        "fc.weight": w["fc.weight"],
        "norm.weight": w["norm.weight"],
        "lm_head.weight": w["lm_head.weight"],
        "d2t": w["d2t"].long(),
        "hidden_norm.weight": w[m + "hidden_norm.weight"],
        "input_layernorm.weight": w[m + "input_layernorm.weight"],
        "post_attention_layernorm.weight": w[m + "post_attention_layernorm.weight"],
        "self_attn.qkv_proj.weight": torch.cat([w[m + f"self_attn.{x}_proj.weight"] for x in "qkv"]),
        "self_attn.o_proj.weight": w[m + "self_attn.o_proj.weight"],
        "mlp.gate_up_proj.weight": torch.cat([w[m + "mlp.gate_proj.weight"], w[m + "mlp.up_proj.weight"]]),
        "mlp.down_proj.weight": w[m + "mlp.down_proj.weight"],
    }
    if kept_token_ids is not None:
        state = _keep_rows(state, kept_token_ids, folder)
    with torch.device("meta"):
        head = Eagle3Head(config, target_hidden, state["d2t"].numel())
    head.load_state_dict(state, assign=True, strict=True)
    head.inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
    mapped = head.map_tokens(torch.arange(len(head.d2t)))
    if int(mapped.min()) < 0 or int(mapped.max()) >= config.vocab_size:
        raise CheckpointError(f"{folder}: d2t maps draft tokens outside the target vocabulary")
    head = head.to(target.norm.weight.device).eval().requires_grad_(False)
    if prepack:  # inference only: the packed linears have no .weight to train or inspect
        prepack_linears(head, native_kernels_for(head))  # like the target's linears (models/linear.py)
    return head


def _keep_rows(state: dict[str, Tensor], kept: Tensor, folder: Path) -> dict[str, Tensor]:
    """``state`` with only the draft-vocabulary rows whose target tokens are in ``kept`` [n]; d2t renumbered."""
    own = state["d2t"] + torch.arange(len(state["d2t"]))
    rows = torch.isin(own, kept.to(own.device)).nonzero().flatten()
    if rows.numel() == 0:
        raise ValueError(f"{folder}: the draft vocabulary asked for (draft_vocab) keeps none of the head's {len(own)} tokens")
    return state | {"lm_head.weight": state["lm_head.weight"][rows], "d2t": own[rows] - torch.arange(len(rows))}
