"""Load a local HF checkpoint folder of the Llama family into :class:`Transformer`.

Knows: ``config.json`` plus weights as ``model.safetensors``, sharded
safetensors (``model.safetensors.index.json``), or, only when no safetensors
exist, ``pytorch_model.bin`` (sharded or not) read with ``weights_only=True``.
Every tensor is checked against the shape the config implies; a missing
shard, a missing tensor, an unexpected tensor or a wrong shape is a
:class:`CheckpointError` naming the file and the tensor.

Does not know: hubs (nothing is downloaded), quantised checkpoints, or
tokenizers (``tokenizer.py``).
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor

from speculab.models.config import ModelConfig
from speculab.models.linear import is_bf16_exact, native_kernels_for, prepack_linears
from speculab.models.llama import Transformer, rope_inv_freq
from speculab.models.native_layers import NativeLayers

IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete or does not match its config."""


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The HF tensor names of a Llama-family checkpoint and their shapes."""
    h, d = config.hidden_size, config.head_dim
    q, kv = config.num_heads * d, config.num_kv_heads * d
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (config.intermediate_size, h),
            p + "mlp.up_proj.weight": (config.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, config.intermediate_size),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        }
        if config.qkv_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,), p + "self_attn.v_proj.bias": (kv,)}
    return shapes


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a checkpoint folder, safetensors first."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"), ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (folder / single).exists():
            return [folder / single]
        if (folder / index).exists():
            try:
                weight_map = json.loads((folder / index).read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as err:
                raise CheckpointError(f"{folder / index}: not a valid shard index ({err})") from None
            shards = [folder / name for name in sorted(set(weight_map.values()))]
            missing = [s.name for s in shards if not s.exists()]
            if missing:
                raise CheckpointError(f"{folder / index} names shard(s) that are missing: {', '.join(missing)}")
            return shards
    raise CheckpointError(f"{folder}: no model.safetensors, sharded safetensors or pytorch_model.bin found")


def iter_tensors(files: list[Path]) -> Iterator[tuple[Path, str, Tensor]]:
    """Yield (file, name, tensor) for every tensor, one at a time, so peak memory stays near one copy."""
    for path in files:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    yield path, name, f.get_tensor(name)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            for name, tensor in state.items():
                yield path, name, tensor


def read_checkpoint(folder: Path, config: ModelConfig, dtype: torch.dtype) -> dict[str, Tensor]:
    """All tensors of the checkpoint, checked against ``config`` and cast to ``dtype``."""
    shapes = expected_shapes(config)
    tensors: dict[str, Tensor] = {}
    for path, name, tensor in iter_tensors(weight_files(folder)):
        if name.endswith(IGNORED_SUFFIXES) or (name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        if name not in shapes:
            raise CheckpointError(f"{path}: unexpected tensor {name!r} for a {config.model_type} model of this config")
        if tuple(tensor.shape) != shapes[name]:
            raise CheckpointError(f"{path}: tensor {name!r} has shape {tuple(tensor.shape)}, but config.json implies {shapes[name]}")
        tensors[name] = tensor.to(dtype)
    missing = sorted(set(shapes) - set(tensors))
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise CheckpointError(f"{folder}: tensor(s) missing from the checkpoint: {', '.join(missing[:3])}{more}")
    return tensors


def to_speculab_state(tensors: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """Rename HF tensors to ours, fusing q|k|v and gate|up (consumes ``tensors``)."""
    state = {
        "embed_tokens.weight": tensors.pop("model.embed_tokens.weight"),
        "norm.weight": tensors.pop("model.norm.weight"),
    }
    state["lm_head.weight"] = state["embed_tokens.weight"] if config.tie_word_embeddings else tensors.pop("lm_head.weight")
    for i in range(config.num_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        take = lambda *names: [tensors.pop(hf + n) for n in names]  # noqa: E731
        state[ours + "self_attn.qkv_proj.weight"] = torch.cat(take(*(f"self_attn.{x}_proj.weight" for x in "qkv")))
        if config.qkv_bias:
            state[ours + "self_attn.qkv_proj.bias"] = torch.cat(take(*(f"self_attn.{x}_proj.bias" for x in "qkv")))
        state[ours + "self_attn.o_proj.weight"] = tensors.pop(hf + "self_attn.o_proj.weight")
        state[ours + "mlp.gate_up_proj.weight"] = torch.cat(take("mlp.gate_proj.weight", "mlp.up_proj.weight"))
        state[ours + "mlp.down_proj.weight"] = tensors.pop(hf + "mlp.down_proj.weight")
        state[ours + "input_layernorm.weight"] = tensors.pop(hf + "input_layernorm.weight")
        state[ours + "post_attention_layernorm.weight"] = tensors.pop(hf + "post_attention_layernorm.weight")
    return state


def build_model(config: ModelConfig, state: dict[str, Tensor], device: str | torch.device = "cpu", prepack: bool = True) -> Transformer:
    """A ready-to-run Transformer from speculab-named tensors (takes ownership of ``state``)."""
    with torch.device("meta"):
        model = Transformer(config)
    model.load_state_dict(state, assign=True, strict=True)
    state.clear()  # so prepacking below does not hold two copies of every weight
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    # The RoPE table is derived, not stored; meta-device construction left it empty.
    model.inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
    model = model.to(device).eval().requires_grad_(False)
    kernels = native_kernels_for(model) if prepack else None
    if kernels is None:  # folded weights are no longer bf16 numbers, so the native kernel keeps the norms apart
        model.fold_norm_weights()
    if prepack:
        prepack_linears(model, kernels)
        _store_embedding_compactly(model)
        model.native_layers = NativeLayers.of(model)
    _release_freed_heap()
    return model


def _store_embedding_compactly(model: Transformer) -> None:
    """Once the lm_head holds its own packed copy, a tied fp32 embedding whose values are all
    bf16 numbers (any bf16 checkpoint) is kept in bf16: lookups stay exact, memory halves."""
    weight = model.embed_tokens.weight
    if isinstance(model.lm_head, torch.nn.Linear):
        return
    if is_bf16_exact(weight):
        model.embed_tokens.weight = torch.nn.Parameter(weight.detach().to(torch.bfloat16), requires_grad=False)


def _release_freed_heap() -> None:
    """Hand the loader's freed temporaries back to the OS (glibc keeps them otherwise)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def load_model(
    folder: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    prepack: bool = True,
) -> Transformer:
    """Load a local Llama-family checkpoint folder (config.json plus weights)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a checkpoint folder")
    config = ModelConfig.from_file(folder / "config.json")
    tensors = read_checkpoint(folder, config, dtype)
    return build_model(config, to_speculab_state(tensors, config), device, prepack)
