"""The decoder layers run by speculab's C++ loop (``native/layers.cpp``) instead of the Python one.

Knows: which of a Transformer's block tensors the C++ loop reads, in its order, and when it applies: every
block linear is a ``NativeLinear`` (a bf16 checkpoint in fp32 with the kernels built). An EAGLE-1/2 head's one
layer (no input RMSNorm) runs on it too. The C++ loop does
``Block.forward``'s math with speculab's kernels (RMSNorm, RoPE written into the cache, attention, SiLU,
residual sums in the matmuls' stores): the same results to fp32 rounding, each row computed alone, so a
verify forward gives bit for bit what one-token forwards give.
Does not know: the math (``llama.py`` is the reference), or how kernels are built (``native/``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from speculab.models.linear import NativeLinear

# Forwards of at most this many new tokens per row (decode steps, verifies of chains and trees up to 64 nodes) use the
# native attention, which reads each key and value once for all of a KV head's rows: so every such verify keeps the
# bit-identity with one-token forwards. Longer ones (prefill chunks) take ATen's flash attention, as fast there. The
# AVX512 kernel is as fast as flash attention up to q = 32 at least (BENCHMARKS.md, "Verify cost"); the AVX2 one, on an
# EPYC Zen 1, 1.6x faster at q <= 8, 1.2-1.3x at 16-64 and level from 128 (BENCHMARKS.md, "Long contexts on the EPYC
# Zen 1").
ATTENTION_MAX_Q = 64


class NativeLayers:
    def __init__(self, blocks, config, kernels, attention_max_q: int | None = None, input_norm: bool = True):
        empty = torch.empty(0)
        self.kernels = kernels
        self.attention_max_q = attention_max_q
        self.config = config
        self.input_norm = input_norm  # False: the blocks have no RMSNorm before attention (an EAGLE head's layer)
        self.params = [
            [
                empty if not input_norm or layer.input_layernorm.weight is None else layer.input_layernorm.weight,
                layer.self_attn.qkv_proj.packed,
                empty if layer.self_attn.qkv_proj.bias is None else layer.self_attn.qkv_proj.bias,
                layer.self_attn.o_proj.packed,
                empty if layer.post_attention_layernorm.weight is None else layer.post_attention_layernorm.weight,
                layer.mlp.gate_up_proj.packed,
                layer.mlp.down_proj.packed,
            ]
            for layer in blocks
        ]

    @classmethod
    def of(cls, model) -> NativeLayers | None:
        """The C++ loop for ``model``, or None when a block linear is not native (the Python loop runs)."""
        return cls.of_blocks(list(model.layers), model.config)

    @classmethod
    def of_blocks(cls, blocks: list, config, input_norm: bool = True) -> NativeLayers | None:
        """The C++ loop for these ``llama.Block``s (a model's, or an EAGLE head's one layer with
        ``input_norm=False``), or None when one of their linears is not native."""
        linears = [
            m for layer in blocks for m in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj)
        ]
        if not linears or not all(isinstance(m, NativeLinear) for m in linears):
            return None
        if config.head_dim % 16 or config.head_dim > 128 or config.hidden_size % 8:  # what rope_and_write and cached_attention take
            return None
        return cls(blocks, config, linears[0].kernels, input_norm=input_norm)

    def native_attention_max_q(self) -> int:
        """The most new tokens per row that the native attention takes (more: ATen's flash attention)."""
        return self.attention_max_q if self.attention_max_q is not None else ATTENTION_MAX_Q

    def __call__(self, x: Tensor, batch, cache, cos: Tensor, sin: Tensor, mask: Tensor, capture_layers: tuple[int, ...]):
        """x: [batch, q, hidden] → (x after the last layer, {layer: [batch, q, hidden] entering it})."""
        return self.parts([LayerInput(x, batch, cos, sin, mask)], cache, capture_layers)[0]

    def parts(self, parts: list[LayerInput], cache, capture_layers: tuple[int, ...]) -> list[tuple[Tensor, dict[int, Tensor]]]:
        """Several batches in one pass (a step's verify and a prompt's chunk): their rows share each matmul, so every
        weight is read once, and each attends alone; per part, what ``__call__`` gives for it alone, bit for bit (the
        kernels compute every row alone)."""
        c, layers = self.config, sorted(capture_layers)
        x, captured = self.kernels.decoder_layers(
            [p.x.contiguous() for p in parts],
            self.params,
            cache.kv,
            [p.batch.rows for p in parts],
            [p.batch.contiguous_rows.start if p.batch.contiguous_rows is not None else -1 for p in parts],
            [p.batch.cache_pos for p in parts],
            [p.cos for p in parts],
            [p.sin for p in parts],
            [p.mask for p in parts],
            c.num_heads,
            c.num_kv_heads,
            c.head_dim,
            c.rms_norm_eps,
            layers,
            self.native_attention_max_q(),
            input_norm=self.input_norm,
        )
        sizes, shapes = [p.x.shape[0] * p.x.shape[1] for p in parts], [p.x.shape for p in parts]
        xs = [t.view(shape) for t, shape in zip(x.split(sizes), shapes)]
        per_layer = [[t.view(shape) for t, shape in zip(cap.split(sizes), shapes)] for cap in captured]
        return [(xs[i], {layer: per_layer[j][i] for j, layer in enumerate(layers)}) for i in range(len(parts))]


@dataclass(frozen=True)
class LayerInput:
    """One part of a forward as the layers take it."""

    x: Tensor  # [batch, q, hidden]: the part's embedded tokens
    batch: object  # llama.ForwardBatch: its rows, positions and mask
    cos: Tensor  # [batch, 1, q, head_dim]
    sin: Tensor  # [batch, 1, q, head_dim]
    mask: Tensor  # [batch, 1, group*q, length] additive
