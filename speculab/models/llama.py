"""The Llama-family forward, in one file (gpt-fast style).

Knows: RMSNorm, RoPE (default, linear, llama3 scaling), grouped-query attention
through ``scaled_dot_product_attention``, SwiGLU, tied or untied lm_head, qkv
bias (Qwen2). The forward takes explicit RoPE positions, explicit KV-cache
write positions and an explicit attention mask, so a batch of chains, of
ragged prompts or of draft trees is the same call with other tensors.

Does not know: how tensors are loaded (``loading.py``), how the cache is laid
out beyond the per-layer view (``kv_cache.py``), or which tokens to run
(``engine.py``).

Weights are fused at load time (q|k|v and gate|up), so a layer is four
matmuls; on the CPU they can be prepacked for oneDNN or run by speculab's
bf16-weight kernel (``linear.py``). When every block runs on that kernel, the
layers' loop itself runs in C++ (``native_layers.py``, ``native/layers.cpp``):
``Block.forward`` below stays the reference and the fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speculab.models.config import ModelConfig, RopeScaling
from speculab.models.kv_cache import KVCache
from speculab.models.native_layers import LayerInput


@dataclass
class ForwardBatch:
    """Everything one forward needs besides the tokens; built once and shared by all layers.

    ``rows`` maps batch rows to cache slots. ``cache_pos`` is where each new token's
    K/V is written; ``input_pos`` is its RoPE position. For a chain both are equal;
    for a draft tree ``input_pos`` is context length + depth while ``cache_pos`` is
    the node's own slot. ``mask`` says which cached positions each new token sees.
    """

    rows: Tensor  # [batch] cache slot of each row
    input_pos: Tensor  # [batch, q] RoPE positions
    cache_pos: Tensor  # [batch, q] KV write positions
    mask: Tensor  # [batch, 1, q, length] bool, True = attend
    contiguous_rows: slice | None = None  # rows as a slice when they are a range (no gather)
    kv_heads_index: Tensor | None = None  # [1, 2*kv_heads, 1], set by the model

    @property
    def length(self) -> int:
        return self.mask.shape[-1]

    def prepare(self, config: ModelConfig) -> None:
        if self.kv_heads_index is None:
            self.kv_heads_index = torch.arange(2 * config.num_kv_heads, device=self.rows.device)[None, :, None]


@dataclass
class ForwardOutput:
    logits: Tensor  # [batch, n, vocab] at the requested positions (all q when none asked)
    hidden: Tensor  # [batch, q, hidden] final hidden states after the last norm (EAGLE features)
    captured: dict[int, Tensor]  # layer index -> [batch, q, hidden] hidden state entering that layer


def causal_batch(rows: Tensor, start: Tensor, q: int, length: int | None = None) -> ForwardBatch:
    """A batch of chains: row i writes q tokens at positions start[i]..start[i]+q-1.

    rows: [batch] cache slots; start: [batch] tokens already in each slot's cache.
    """
    offsets = torch.arange(q, device=start.device)
    pos = start[:, None] + offsets[None, :]  # [batch, q]
    length = int(pos.max()) + 1 if length is None else length
    cols = torch.arange(length, device=start.device)
    mask = cols[None, None, :] <= pos[:, :, None]  # [batch, q, length]
    return ForwardBatch(rows, pos, pos, mask[:, None], _as_slice(rows))


def _as_slice(rows: Tensor) -> slice | None:
    n = rows.numel()
    first = int(rows[0])
    if torch.equal(rows, torch.arange(first, first + n, device=rows.device)):
        return slice(first, first + n)
    return None


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling) -> Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling.kind == "linear":
        inv_freq = inv_freq / scaling.factor
    elif scaling.kind == "llama3":
        old_len = scaling.original_max_position_embeddings
        low_wavelen = old_len / scaling.low_freq_factor
        high_wavelen = old_len / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
        smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
        smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = torch.where(is_medium, smoothed, scaled)
    return inv_freq.float()


def rope_tables(positions: Tensor, inv_freq: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and signed sin for the rotate-half convention: [batch, 1, q, head_dim]. positions: [batch, q]."""
    angles = positions[..., None].float() * inv_freq  # [batch, q, head_dim/2]
    cos, sin = angles.cos(), angles.sin()
    cos = torch.cat((cos, cos), dim=-1)
    sin = torch.cat((-sin, sin), dim=-1)
    return cos[:, None].to(dtype), sin[:, None].to(dtype)


def attention_mask(mask: Tensor, group: int, dtype: torch.dtype) -> Tensor:
    """The bool mask [batch, 1, q, length] as the additive mask of grouped-query attention [batch, 1, group*q, length].

    SDPA would turn a bool mask into an additive one on every call; this is done once for all layers.
    """
    mask = mask.repeat(1, 1, group, 1) if group > 1 else mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


class RMSNorm(nn.Module):
    """RMSNorm; ``weight`` is None once it has been folded into the next linear (``fold_norm_weights``)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight: nn.Parameter | None = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Half precision normalises in fp32 and scales after rounding back, as transformers does.
        normed = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps).to(x.dtype)
        return normed if self.weight is None else self.weight * normed


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, input_size: int | None = None):
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        qkv_out = (config.num_heads + 2 * config.num_kv_heads) * config.head_dim
        # input_size differs from hidden_size only in EAGLE-3 heads, whose attention reads [embedding, hidden].
        self.qkv_proj = nn.Linear(input_size or config.hidden_size, qkv_out, bias=config.qkv_bias)
        self.o_proj = nn.Linear(config.num_heads * config.head_dim, config.hidden_size, bias=False)

    def forward(self, x: Tensor, kv: Tensor, batch: ForwardBatch, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        """x: [batch, q, hidden]; kv: this layer's cache [slots, 2*kv_heads, max_len, head_dim]."""
        heads_index = batch.kv_heads_index
        bsz, q, _ = x.shape
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x).view(bsz, q, h + 2 * hkv, d).transpose(1, 2)  # [batch, heads, q, d]
        qk = qkv[:, : h + hkv]
        qk = torch.addcmul(qk * cos, qk.roll(d // 2, dims=-1), sin)  # RoPE, rotate-half convention
        new_kv = torch.cat((qk[:, h:], qkv[:, h + hkv :]), dim=1)  # [batch, 2*kv_heads, q, d]
        kv.index_put_((batch.rows[:, None, None], heads_index, batch.cache_pos[:, None, :]), new_kv.to(kv.dtype))
        rows = batch.contiguous_rows if batch.contiguous_rows is not None else batch.rows
        cached = kv[rows, :, : batch.length].to(qk.dtype)  # [batch, 2*kv_heads, length, d]; a bf16 cache widened
        # GQA without repeating K/V: the query heads of one group become extra query rows.
        query = qk[:, :h].reshape(bsz, hkv, (h // hkv) * q, d)
        out = F.scaled_dot_product_attention(query, cached[:, :hkv], cached[:, hkv:], attn_mask=mask)
        out = out.view(bsz, h, q, d).transpose(1, 2).reshape(bsz, q, h * d)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, kv: Tensor, batch: ForwardBatch, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), kv, batch, cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.native_layers = None  # the same layers' loop in C++ (native_layers.py), set by the loader when it applies
        # The KV cache's dtype; None: the model's. A bf16 cache under fp32 activations halves the cache's bytes (and,
        # with AMX, runs the attention on the tiles); keys and values are rounded to bf16 once, when written.
        self.kv_dtype: torch.dtype | None = None

    @torch.no_grad()
    def fold_norm_weights(self) -> None:
        """Fold each layer's RMSNorm weights into the linear that follows it (one multiply less per norm).

        norm(x) @ W.T == (x / rms(x)) @ (W * w).T; the product is formed in fp32, then rounded once.
        The final norm keeps its weight: its output is the feature EAGLE heads read.
        """
        for layer in self.layers:
            for norm, linear in (
                (layer.input_layernorm, layer.self_attn.qkv_proj),
                (layer.post_attention_layernorm, layer.mlp.gate_up_proj),
            ):
                if norm.weight is None:
                    continue
                linear.weight.copy_((linear.weight.float() * norm.weight.float()[None, :]).to(linear.weight.dtype))
                norm.weight = None

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.weight.dtype

    @torch.no_grad()
    def lm_head_rows(self, token_ids: Tensor) -> Tensor:
        """The lm_head's weight rows for ``token_ids`` [n] → [n, hidden], in the model's dtype.

        A prepacked lm_head no longer holds a plain weight: a tied one is read from the embedding, an
        untied one is recovered exactly by running it on the identity (each output is one weight times 1).
        """
        if isinstance(self.lm_head, nn.Linear):
            return self.lm_head.weight[token_ids].to(self.dtype)
        if self.config.tie_word_embeddings:
            return self.embed_tokens.weight[token_ids].to(self.dtype)
        eye = torch.eye(self.config.hidden_size, dtype=self.dtype, device=self.norm.weight.device)
        return self.lm_head(eye)[:, token_ids].T.contiguous()

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        c = self.config
        return KVCache(c.num_layers, num_slots, c.num_kv_heads, c.head_dim, max_len, self.kv_dtype or self.dtype, self.norm.weight.device)

    def cache_bytes(self, num_slots: int, max_len: int) -> int:
        """The bytes ``new_cache(num_slots, max_len)`` holds once written."""
        c = self.config
        return KVCache.nbytes_for(c.num_layers, num_slots, c.num_kv_heads, c.head_dim, max_len, self.kv_dtype or self.dtype)

    @torch.no_grad()
    def forward(
        self,
        tokens: Tensor,  # [batch, q]
        batch: ForwardBatch,
        cache: KVCache,
        logits_at: Tensor | None = None,  # [batch, n] indices into q; None = every position
        capture_layers: tuple[int, ...] = (),
        lm_head: Callable[[Tensor], Tensor] | None = None,  # replaces the model's own (a reduced vocabulary's)
    ) -> ForwardOutput:
        layer_input = self._layer_input(tokens, batch)
        if self.native_layers is not None:
            x, captured = self.native_layers.parts([layer_input], cache, capture_layers)[0]
        else:
            x, captured, cos, sin, mask = layer_input.x, {}, layer_input.cos, layer_input.sin, layer_input.mask
            for i, layer in enumerate(self.layers):
                if i in capture_layers:
                    captured[i] = x
                x = layer(x, cache.layer(i), batch, cos, sin, mask)
        return self._output(x, captured, logits_at, lm_head)

    @torch.no_grad()
    def forward_parts(self, parts: list[ForwardPart], cache: KVCache, capture_layers: tuple[int, ...] = ()) -> list[ForwardOutput]:
        """Several batches in one forward (a step's verify and a prompt's chunk), each part's output what ``forward``
        gives for it alone. On the C++ loop their rows share each matmul, so the weights are read once for all of
        them; the Python loop runs them in turn."""
        if self.native_layers is None or len(parts) == 1:
            return [self(p.tokens, p.batch, cache, p.logits_at, capture_layers) for p in parts]
        inputs = [self._layer_input(p.tokens, p.batch) for p in parts]
        layered = self.native_layers.parts(inputs, cache, capture_layers)
        return [self._output(x, captured, p.logits_at, None) for (x, captured), p in zip(layered, parts)]

    def _layer_input(self, tokens: Tensor, batch: ForwardBatch) -> LayerInput:
        """The embedded tokens [batch, q] and what every layer reads of ``batch``: RoPE tables and the additive mask."""
        x = self.embed_tokens(tokens).to(self.dtype)  # the table may be stored compactly (loading.py)
        batch.prepare(self.config)
        cos, sin = rope_tables(batch.input_pos, self.inv_freq, self.dtype)
        mask = attention_mask(batch.mask, self.config.num_heads // self.config.num_kv_heads, self.dtype)
        return LayerInput(x, batch, cos, sin, mask)

    def _output(self, x: Tensor, captured: dict[int, Tensor], logits_at: Tensor | None, lm_head) -> ForwardOutput:
        """The last norm over x [batch, q, hidden], and the logits at ``logits_at`` [batch, n] (every position: None)."""
        hidden = self.norm(x)
        if logits_at is not None:
            picked = hidden.gather(1, logits_at[:, :, None].expand(-1, -1, hidden.shape[-1]))
        else:
            picked = hidden
        return ForwardOutput((lm_head or self.lm_head)(picked), hidden, captured)


@dataclass
class ForwardPart:
    """One batch of a forward that runs several (``Transformer.forward_parts``)."""

    tokens: Tensor  # [batch, q]
    batch: ForwardBatch
    logits_at: Tensor | None = None  # [batch, n] indices into q; None = every position


def prefill(
    model: Transformer,
    cache: KVCache,
    slot: int,
    prompt_ids: list[int],
    capture_layers: tuple[int, ...] = (),
    chunk: int = 512,
    start: int = 0,
) -> list[ForwardOutput]:
    """Run a prompt into one cache slot in chunks (bounding activations) and commit it; ``start``: the positions the
    slot holds already (a shared prefix's KV, loaded by the caller), the rest is run from there.

    Returns each chunk's output; logits are computed for the chunk's last position only.
    """
    device = model.norm.weight.device
    cache.lengths[slot] = start
    outputs = []
    for begin in range(start, len(prompt_ids), chunk):
        end = min(begin + chunk, len(prompt_ids))
        part = prompt_part(slot, prompt_ids, begin, end, device)
        outputs.append(model(part.tokens, part.batch, cache, logits_at=part.logits_at, capture_layers=capture_layers))
        cache.commit(slot, end)
    return outputs


def prompt_part(slot: int, prompt_ids: list[int], begin: int, end: int, device: torch.device) -> ForwardPart:
    """Prompt positions [begin, end) into ``slot``, which holds the ``begin`` before them; logits at the last one.
    The caller commits the slot's length to ``end`` after the forward."""
    tokens = torch.tensor([prompt_ids[begin:end]], device=device)
    batch = causal_batch(torch.tensor([slot], device=device), torch.tensor([begin], device=device), end - begin)
    return ForwardPart(tokens, batch, torch.tensor([[end - begin - 1]], device=device))
