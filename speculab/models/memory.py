"""Memory accounting for speculative decoding, analytic: weights, KV cache, and what is left for the KV cache.

Knows: the tensor inventory of a Llama-family model (:class:`ModelConfig`), of an EAGLE-1/2 head
(fc 2H→H with bias, one decoder layer without input norm, sharing the target's embedding and lm_head),
of an EAGLE-3 head (fc 3H→H, attention on 2H inputs, four norms, its own lm_head over a reduced draft
vocabulary), what each costs at a given number of bytes per parameter or as AWQ int4, how tensor
parallelism splits weights and KV heads (vLLM/SGLang style: linear layers, embedding and lm_head
sharded; norms and the EAGLE fc replicated; KV heads split, replicated once there are fewer than ranks),
and how many tokens of KV cache fit in what remains of a device's memory.

Does not know: measured memory. Activations, CUDA graphs, the CUDA context, NCCL and allocator
fragmentation enter only as ``overhead_bytes``, a number the caller states. Paged-KV block rounding
(< one block per device) is ignored. Buffers that are not parameters (EAGLE-3's d2t/t2d maps, RoPE
tables) are ignored; they are megabytes at most.

AWQ int4 formula (AutoAWQ GEMM layout, group size 128), per linear layer with ``in`` inputs and ``out``
outputs: 4-bit weights ``in·out/2`` bytes, plus per group of 128 inputs and per output an fp16 scale
(2 bytes) and a 4-bit packed zero point (0.5 bytes): ``ceil(in/128)·out·2.5`` bytes; about 0.52 bytes
per weight. Embedding, lm_head, norms and biases stay fp16 (2 bytes per parameter).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

from speculab.models.config import ModelConfig

SESSION_TOKENS = 32_768  # one "32k session": a request that may grow to 32768 tokens of context
AWQ_GROUP_SIZE = 128
AWQ_SCALE_BYTES = 2.0  # fp16 scale per (group, output)
AWQ_ZERO_BYTES = 0.5  # 4-bit packed zero point per (group, output)
HALF_BYTES = 2  # what AWQ leaves unquantised is stored in fp16
EAGLE3_DRAFT_VOCAB = 32_000  # the published EAGLE-3 heads' draft vocabulary
DRAFTER_KINDS = (None, "draft", "eagle", "eagle3")  # none, a draft model, an EAGLE-1 head, an EAGLE-3 head

WeightFormat = float | str  # bytes per parameter (2 = bf16/fp16, 4 = fp32), or "awq-int4" ("awq"), "gptq-int4", "fp8"


@dataclass(frozen=True)
class ModelTensors:
    """A model's parameters by how they are stored and split; counts are parameters, not bytes."""

    linears: tuple[tuple[int, int], ...]  # (in_features, out_features) of every quantisable, sharded matrix
    sharded_dense: int  # embedding, lm_head, biases of sharded layers: split across ranks, never quantised
    replicated_dense: int  # norms (and EAGLE fc): every rank holds all of them
    replicated_linears: tuple[tuple[int, int], ...] = ()  # plain linears every rank holds whole (EAGLE fc)

    @property
    def parameters(self) -> int:
        mats = sum(i * o for i, o in self.linears + self.replicated_linears)
        return mats + self.sharded_dense + self.replicated_dense


@dataclass(frozen=True)
class WeightFootprint:
    """Weight bytes of one model: ``sharded_bytes`` split evenly over tensor-parallel ranks, ``replicated_bytes`` on each."""

    parameters: int
    sharded_bytes: int
    replicated_bytes: int
    weight_format: str

    @property
    def total_bytes(self) -> int:
        return self.sharded_bytes + self.replicated_bytes

    def per_device_bytes(self, tensor_parallel: int = 1) -> int:
        return math.ceil(self.sharded_bytes / tensor_parallel) + self.replicated_bytes


class KVCapacity(NamedTuple):
    free_bytes: int  # memory left for the KV cache (never negative)
    tokens: int  # tokens of KV cache that fit in it
    sessions: int  # whole sessions of ``session_tokens`` tokens


def _layer_linears(cfg: ModelConfig, attention_input: int | None = None) -> list[tuple[int, int]]:
    """One decoder layer's matrices as (in, out): q, k, v, o, gate, up, down."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    a = attention_input or h
    return [(a, q), (a, kv), (a, kv), (q, h), (h, i), (h, i), (i, h)]


def _qkv_bias(cfg: ModelConfig) -> int:
    return (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim if cfg.qkv_bias else 0


def model_tensors(cfg: ModelConfig) -> ModelTensors:
    """A full Llama-family model: layers, embedding, lm_head (unless tied), final norm."""
    heads = cfg.vocab_size * cfg.hidden_size * (1 if cfg.tie_word_embeddings else 2)
    return ModelTensors(
        linears=tuple(_layer_linears(cfg) * cfg.num_layers),
        sharded_dense=heads + cfg.num_layers * _qkv_bias(cfg),
        replicated_dense=cfg.num_layers * 2 * cfg.hidden_size + cfg.hidden_size,  # two norms per layer + final
    )


def eagle_head_tensors(
    head_cfg: ModelConfig, fc_bias: bool = True, own_embedding: bool = False, draft_vocab_size: int | None = None
) -> ModelTensors:
    """An EAGLE-1/2 head sized by ``head_cfg`` (the target's config for the published heads).

    fc: cat(embedding, feature) 2H → H, with bias as in EAGLE-1's layout; one decoder layer whose input
    norm is absent (only post_attention_layernorm); no final norm; embedding and lm_head shared with the
    target unless ``own_embedding``. ``draft_vocab_size``: the proposer's copy of that many lm_head rows
    (a reduced draft vocabulary, FR-Spec).
    """
    h = head_cfg.hidden_size
    return ModelTensors(
        linears=tuple(_layer_linears(head_cfg)),
        sharded_dense=_qkv_bias(head_cfg) + (head_cfg.vocab_size * h if own_embedding else 0) + (draft_vocab_size or 0) * h,
        replicated_dense=h + (h if fc_bias else 0),  # post_attention_layernorm, fc bias
        replicated_linears=((2 * h, h),),
    )


def eagle3_head_tensors(
    head_cfg: ModelConfig, target_hidden: int | None = None, draft_vocab_size: int = EAGLE3_DRAFT_VOCAB, own_embedding: bool = False
) -> ModelTensors:
    """An EAGLE-3 head: fc 3·H_target → H (no bias), attention on 2H inputs, MLP, four norms, own lm_head [draft_vocab_size, H]."""
    h = head_cfg.hidden_size
    return ModelTensors(
        linears=tuple(_layer_linears(head_cfg, attention_input=2 * h)),
        sharded_dense=_qkv_bias(head_cfg) + draft_vocab_size * h + (head_cfg.vocab_size * h if own_embedding else 0),
        replicated_dense=4 * h,  # hidden_norm, input_layernorm, post_attention_layernorm, norm
        replicated_linears=((3 * (target_hidden or h), h),),
    )


def eagle_head_parameters(target_cfg: ModelConfig, fc_bias: bool = True, own_embedding: bool = False) -> int:
    """Parameters of the EAGLE-2 head for ``target_cfg``: fc + one decoder layer (+ embedding if it has its own)."""
    return eagle_head_tensors(target_cfg, fc_bias, own_embedding).parameters


def _awq_linear_bytes(in_features: int, out_features: int, group_size: int = AWQ_GROUP_SIZE) -> int:
    groups = math.ceil(in_features / group_size)
    return math.ceil(in_features * out_features / 2) + math.ceil(groups * out_features * (AWQ_SCALE_BYTES + AWQ_ZERO_BYTES))


def _gptq_linear_bytes(in_features: int, out_features: int, group_size: int = AWQ_GROUP_SIZE) -> int:
    """GPTQ int4 (vLLM's layout): AWQ's 4-bit weights, fp16 scales and 4-bit zeros, plus g_idx, one int32 per input."""
    return _awq_linear_bytes(in_features, out_features, group_size) + 4 * in_features


def _fp8_linear_bytes(in_features: int, out_features: int) -> int:
    """FP8 weights (the common vLLM checkpoints: e4m3, one fp32 scale per output channel)."""
    return in_features * out_features + 4 * out_features


QUANTISED_LINEAR_BYTES = {  # weight format -> bytes of one linear layer; the rest (embedding, lm_head, norms) fp16
    "awq-int4": _awq_linear_bytes,
    "gptq-int4": _gptq_linear_bytes,
    "fp8": _fp8_linear_bytes,
}


def weights(tensors: ModelTensors, weight_format: WeightFormat) -> WeightFootprint:
    """Bytes of ``tensors`` stored as ``weight_format``: bytes per parameter, or one of ``QUANTISED_LINEAR_BYTES``
    ("awq" is "awq-int4"), whose quantised linears are sharded and whose other tensors stay fp16."""
    if isinstance(weight_format, str):
        name = "awq-int4" if weight_format.lower() == "awq" else weight_format.lower()
        if name not in QUANTISED_LINEAR_BYTES:
            raise ValueError(f"weight format {weight_format!r}: give bytes per parameter or one of {', '.join(QUANTISED_LINEAR_BYTES)}")
        linear_bytes = QUANTISED_LINEAR_BYTES[name]
        sharded = sum(linear_bytes(i, o) for i, o in tensors.linears) + HALF_BYTES * tensors.sharded_dense
        replicated = HALF_BYTES * (tensors.replicated_dense + sum(i * o for i, o in tensors.replicated_linears))
        label = f"{name}-g{AWQ_GROUP_SIZE}" if name.endswith("int4") else name
        return WeightFootprint(tensors.parameters, sharded, replicated, label)
    bpp = float(weight_format)
    if bpp <= 0:
        raise ValueError(f"bytes per parameter must be positive, got {weight_format}")
    sharded_params = sum(i * o for i, o in tensors.linears) + tensors.sharded_dense
    replicated_params = tensors.replicated_dense + sum(i * o for i, o in tensors.replicated_linears)
    label = f"{bpp:g} bytes/param"
    return WeightFootprint(tensors.parameters, math.ceil(sharded_params * bpp), math.ceil(replicated_params * bpp), label)


def model_weights(cfg: ModelConfig, weight_format: WeightFormat = 2) -> WeightFootprint:
    """Weights of a target or draft model."""
    return weights(model_tensors(cfg), weight_format)


def kv_heads_per_device(num_kv_heads: int, tensor_parallel: int = 1) -> int:
    """KV heads one rank holds: split across ranks, replicated (one each) once there are more ranks than heads."""
    return max(1, math.ceil(num_kv_heads / tensor_parallel))


def kv_bytes_per_token(cfg: ModelConfig, dtype_bytes: float, num_layers: int | None = None, tensor_parallel: int = 1) -> int:
    """KV-cache bytes one token costs on one rank: 2 (K and V) · layers · kv heads per rank · head_dim · bytes.

    ``num_layers`` defaults to all of the model's layers; an EAGLE head caches one layer.
    """
    layers = cfg.num_layers if num_layers is None else num_layers
    return math.ceil(2 * layers * kv_heads_per_device(cfg.num_kv_heads, tensor_parallel) * cfg.head_dim * dtype_bytes)


def drafter_tensors(
    drafter_kind: str | None, target_cfg: ModelConfig, drafter_cfg: ModelConfig | None, **head_options: Any
) -> ModelTensors | None:
    """The drafter's tensors: a draft model's (``drafter_cfg``), or an EAGLE head's (sized by ``drafter_cfg``, else the target)."""
    if drafter_kind not in DRAFTER_KINDS:
        raise ValueError(f"drafter kind {drafter_kind!r}: expected one of {DRAFTER_KINDS}")
    if drafter_kind is None:
        return None
    if drafter_kind == "draft":
        if drafter_cfg is None:
            raise ValueError("a draft model needs its config")
        tensors = model_tensors(drafter_cfg)
        reduced = head_options.get("draft_vocab_size") or 0  # the proposer's copy of that many lm_head rows
        return dataclasses.replace(tensors, sharded_dense=tensors.sharded_dense + reduced * drafter_cfg.hidden_size)
    head_cfg = drafter_cfg or target_cfg
    if drafter_kind == "eagle":
        return eagle_head_tensors(head_cfg, **head_options)
    return eagle3_head_tensors(head_cfg, target_hidden=target_cfg.hidden_size, **head_options)


def drafter_kv_bytes_per_token(
    drafter_kind: str | None, target_cfg: ModelConfig, drafter_cfg: ModelConfig | None, dtype_bytes: float, tensor_parallel: int = 1
) -> int:
    """A draft model caches all its layers; an EAGLE head one layer (its own config, else the target's); none caches nothing."""
    if drafter_kind not in DRAFTER_KINDS:
        raise ValueError(f"drafter kind {drafter_kind!r}: expected one of {DRAFTER_KINDS}")
    if drafter_kind is None:
        return 0
    if drafter_kind == "draft":
        if drafter_cfg is None:
            raise ValueError("a draft model needs its config")
        return kv_bytes_per_token(drafter_cfg, dtype_bytes, tensor_parallel=tensor_parallel)
    return kv_bytes_per_token(drafter_cfg or target_cfg, dtype_bytes, num_layers=1, tensor_parallel=tensor_parallel)


def kv_capacity(
    usable_bytes: float, weights_bytes: float, kv_bytes_per_token: float, overhead_bytes: float = 0, session_tokens: int = SESSION_TOKENS
) -> KVCapacity:
    """Tokens of KV cache that fit in ``usable - weights - overhead`` (all per device), and whole sessions of ``session_tokens``."""
    if kv_bytes_per_token <= 0:
        raise ValueError("kv_bytes_per_token must be positive")
    free = max(0, int(usable_bytes - weights_bytes - overhead_bytes))
    tokens = int(free // kv_bytes_per_token)
    return KVCapacity(free, tokens, tokens // session_tokens)


def estimate(
    target_cfg: ModelConfig,
    drafter_kind: str | None = None,
    drafter_cfg: ModelConfig | None = None,
    dtype_bytes: float = 2,
    device_bytes: int | None = None,
    tensor_parallel: int = 1,
    *,
    target_weight_format: WeightFormat | None = None,
    kv_dtype_bytes: float | None = None,
    memory_utilization: float = 1.0,
    overhead_bytes: int = 0,
    drafter_tensor_parallel: int | None = None,
    session_tokens: int = SESSION_TOKENS,
    **head_options: Any,
) -> dict[str, Any]:
    """All memory figures of one serving setup, as a JSON-serialisable dict (bytes are ints).

    ``device_bytes`` is one device's memory (default :func:`machine_memory_bytes`); ``memory_utilization``
    is the share of it the engine may use (vLLM's gpu_memory_utilization); ``overhead_bytes`` is what
    activations, CUDA graphs and the runtime take per device. ``dtype_bytes`` sizes the drafter's weights
    and, unless ``kv_dtype_bytes`` is given, both KV caches; ``target_weight_format`` (default
    ``dtype_bytes``) may be "awq". The drafter runs on the first ``drafter_tensor_parallel`` ranks
    (default: all); the figures are for rank 0, which holds the most. ``head_options`` go to the EAGLE
    head inventory (``fc_bias``, ``own_embedding``, ``draft_vocab_size``).
    """
    tp = tensor_parallel
    dtp = drafter_tensor_parallel or tp
    if not 1 <= dtp <= tp:
        raise ValueError(f"drafter_tensor_parallel {dtp} must be between 1 and tensor_parallel {tp}")
    kv_bytes = dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    device_bytes = machine_memory_bytes() if device_bytes is None else int(device_bytes)
    usable = int(device_bytes * memory_utilization)

    target_w = model_weights(target_cfg, dtype_bytes if target_weight_format is None else target_weight_format)
    tensors = drafter_tensors(drafter_kind, target_cfg, drafter_cfg, **head_options)
    drafter_w = weights(tensors, dtype_bytes) if tensors is not None else WeightFootprint(0, 0, 0, "none")
    target_kv = kv_bytes_per_token(target_cfg, kv_bytes, tensor_parallel=tp)
    drafter_kv = drafter_kv_bytes_per_token(drafter_kind, target_cfg, drafter_cfg, kv_bytes, tensor_parallel=dtp)

    weights_rank0 = target_w.per_device_bytes(tp) + drafter_w.per_device_bytes(dtp)
    kv_rank0 = target_kv + drafter_kv  # every cached token is cached by the target and by the drafter
    capacity = kv_capacity(usable, weights_rank0, kv_rank0, overhead_bytes, session_tokens)
    return {
        "drafter_kind": drafter_kind,
        "tensor_parallel": tp,
        "drafter_tensor_parallel": dtp if drafter_kind else None,
        "dtype_bytes": dtype_bytes,
        "kv_dtype_bytes": kv_bytes,
        "target_weight_format": target_w.weight_format,
        "drafter_weight_format": drafter_w.weight_format,
        "target_parameters": target_w.parameters,
        "drafter_parameters": drafter_w.parameters,
        "target_weights_bytes": target_w.total_bytes,
        "target_weights_bytes_per_device": target_w.per_device_bytes(tp),
        "drafter_weights_bytes": drafter_w.total_bytes,
        "drafter_weights_bytes_per_device": drafter_w.per_device_bytes(dtp),
        "target_kv_bytes_per_token": kv_bytes_per_token(target_cfg, kv_bytes),
        "target_kv_bytes_per_token_per_device": target_kv,
        "drafter_kv_bytes_per_token": drafter_kv_bytes_per_token(drafter_kind, target_cfg, drafter_cfg, kv_bytes),
        "drafter_kv_bytes_per_token_per_device": drafter_kv,
        "device_bytes": device_bytes,
        "memory_utilization": memory_utilization,
        "usable_bytes_per_device": usable,
        "overhead_bytes_per_device": int(overhead_bytes),
        "weights_bytes_per_device": weights_rank0,
        "kv_bytes_per_token_per_device": kv_rank0,
        "kv_free_bytes_per_device": capacity.free_bytes,
        "kv_capacity_tokens": capacity.tokens,
        "session_tokens": session_tokens,
        "kv_capacity_sessions": capacity.sessions,
    }


def machine_memory_bytes() -> int:
    """Bytes of memory of the device the model runs on: CUDA device 0 when available, else physical RAM."""
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).total_memory)
    except ImportError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError("cannot tell this machine's memory size")
