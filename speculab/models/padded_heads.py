"""A Llama-family checkpoint with zero attention heads added, so that tensor parallelism can split it.

vLLM splits the query heads evenly over its ranks (and the KV heads, or replicates them when there are fewer than
ranks); SmolLM2-135M's 9 query and 3 KV heads split over 1, 3 or 9 ranks only. Added heads whose query, key and
value rows and whose ``o_proj`` columns are zero change nothing: a zero query scores every position alike, the
average of zero values is zero, and zero ``o_proj`` columns add nothing to the layer's output. So the padded model
computes the original's function exactly (up to the order of a sum across ranks), and serves to run real
multi-rank vLLM on the small embedded model. Query heads are added per KV group (grouped-query attention reads
query head i with KV head i // group), so the original heads keep their KV heads.

Knows: the HF tensor names (``loading.expected_shapes``) and the config's head counts. Does not know: engines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from speculab.models.config import ModelConfig

COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def padded_counts(config: ModelConfig, ranks: int) -> tuple[int, int]:
    """The fewest (query heads, KV heads) at or above the model's that ``ranks`` divides, the group size kept."""
    group = config.num_heads // config.num_kv_heads
    kv = config.num_kv_heads
    while kv % ranks:
        kv += 1
    return kv * group, kv


def pad_attention_heads(source: Path, out: Path, ranks: int) -> Path:
    """Write ``source`` with zero heads added so ``ranks`` divides both head counts into ``out``; returns ``out``."""
    config = ModelConfig.from_file(Path(source) / "config.json")
    heads, kv_heads = padded_counts(config, ranks)
    d, extra_kv = config.head_dim, kv_heads - config.num_kv_heads
    tensors = load_file(Path(source) / "model.safetensors")
    for name, t in list(tensors.items()):
        if name.endswith(("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            per_kv = heads // kv_heads if "q_proj" in name else 1  # rows of one KV group
            tensors[name] = torch.cat([t, t.new_zeros(extra_kv * per_kv * d, t.shape[1])])
        elif name.endswith("self_attn.o_proj.weight"):
            tensors[name] = torch.cat([t, t.new_zeros(t.shape[0], (heads - config.num_heads) * d)], dim=1)
        elif name.endswith(("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")):
            raise ValueError(f"{source}: {name}: padding heads of a model with attention biases is not supported")
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors", metadata={"format": "pt"})
    raw = json.loads((Path(source) / "config.json").read_text())
    raw |= {"num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": d}
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    for name in COPIED:
        if (Path(source) / name).exists():
            shutil.copy(Path(source) / name, out / name)
    return out
