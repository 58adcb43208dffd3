"""Choosing a device and dtype, and loading a model with its tokenizer.

Knows: which CPUs compute bf16 natively (AMX or AVX512-BF16; elsewhere bf16 is
emulated and slower than fp32), and that CUDA, when present, is preferred.
Does not know: anything about decoding.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from speculab.cpu import cpu_has_native_bf16
from speculab.models.embedded import resolve_model_path
from speculab.models.llama import Transformer
from speculab.models.loading import load_model
from speculab.models.tokenizer import Tokenizer

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str | None = None) -> str:
    """bf16 on CUDA and on CPUs with AMX or AVX512-BF16, fp32 elsewhere."""
    device = device or default_device()
    return "bfloat16" if device.startswith("cuda") or cpu_has_native_bf16() else "float32"


@dataclass
class LoadedModel:
    model: Transformer
    tokenizer: Tokenizer
    path: Path
    dtype: str
    device: str


def load(model_path: str | Path | None = None, dtype: str | None = None, device: str | None = None) -> LoadedModel:
    """Load a checkpoint folder (or the embedded default) with its tokenizer."""
    device = device or default_device()
    dtype = dtype or default_dtype(device)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype == "bfloat16" and device == "cpu" and not cpu_has_native_bf16():
        print(
            "[speculab] note: this CPU has no AMX/AVX512-BF16; bf16 is emulated and multi-token forwards "
            "(prefill, verification) are slow. float32 is faster here.",
            file=sys.stderr,
        )
    path = resolve_model_path(model_path)
    model = load_model(path, DTYPES[dtype], device)
    tokenizer = Tokenizer(path)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"{path}: tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is {model.config.vocab_size}")
    return LoadedModel(model, tokenizer, path, dtype, device)
