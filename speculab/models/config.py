"""Model configuration for the Llama family, read from an HF ``config.json``.

Knows: the fields that decide a Llama-family forward (Llama 2/3/3.1/3.2/3.3,
Qwen2/2.5, Mistral, SmolLM), both the transformers 4.x spelling
(``rope_theta`` + ``rope_scaling``) and the 5.x one (``rope_parameters``).
Does not know: weights, tokenizers, or any architecture outside the family;
those get :class:`UnsupportedModelError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


class UnsupportedModelError(ValueError):
    """The checkpoint is not a Llama-family model speculab can run."""


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling. ``kind`` is ``default``, ``linear`` or ``llama3``."""

    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    sliding_window: int | None = None
    model_type: str = "llama"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], source: str = "config.json") -> ModelConfig:
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedModelError(
                f"{source}: model_type {model_type!r} (architectures {hf.get('architectures')}) "
                f"is not supported; speculab runs the Llama family: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        if hf.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(f"{source}: hidden_act {hf['hidden_act']!r} is not silu")
        hidden = hf["hidden_size"]
        heads = hf["num_attention_heads"]
        rope_theta, scaling = _rope_from_hf(hf, source)
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        window = hf.get("sliding_window") if hf.get("use_sliding_window", model_type == "mistral") else None
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hidden // heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-5),
            rope_theta=rope_theta,
            rope_scaling=scaling,
            max_position_embeddings=hf.get("max_position_embeddings", 8192),
            tie_word_embeddings=hf.get("tie_word_embeddings", False),
            qkv_bias=model_type == "qwen2" or bool(hf.get("attention_bias", False)),
            sliding_window=window,
            model_type=model_type,
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_file(cls, path: Path) -> ModelConfig:
        try:
            hf = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no config.json; a checkpoint folder needs one") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        return cls.from_hf_dict(hf, source=str(path))


def _rope_from_hf(hf: dict[str, Any], source: str) -> tuple[float, RopeScaling]:
    params = hf.get("rope_parameters") or {}
    legacy = hf.get("rope_scaling") or {}
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    spec = {**legacy, **params}
    kind = spec.get("rope_type", spec.get("type", "default"))
    if kind == "default":
        return theta, RopeScaling()
    if kind == "linear":
        return theta, RopeScaling(kind="linear", factor=spec["factor"])
    if kind == "llama3":
        return theta, RopeScaling(
            kind="llama3",
            factor=spec["factor"],
            low_freq_factor=spec.get("low_freq_factor", 1.0),
            high_freq_factor=spec.get("high_freq_factor", 4.0),
            original_max_position_embeddings=spec.get("original_max_position_embeddings", 8192),
        )
    raise UnsupportedModelError(f"{source}: RoPE scaling {kind!r} is not supported (default, linear, llama3)")


# Named configs, gpt-fast style: tiny ones for tests, real ones for analytic memory figures.
CONFIGS: dict[str, ModelConfig] = {
    "smollm2-135m": ModelConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        bos_token_id=1,
        eos_token_ids=(2,),
    ),
    "llama-3.2-1b": ModelConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        rope_theta=500000.0,
        tie_word_embeddings=True,
        rope_scaling=RopeScaling("llama3", 32.0, 1.0, 4.0, 8192),
        max_position_embeddings=131072,
    ),
    "llama-3.3-70b": ModelConfig(
        vocab_size=128256,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192),
        max_position_embeddings=131072,
    ),
}
