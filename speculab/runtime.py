"""Choosing a device and dtype, and loading a model with its tokenizer.

Knows: which CPUs compute bf16 natively (AMX or AVX512-BF16; elsewhere bf16 is
emulated and slower than fp32), that speculab's native kernels run a checkpoint
stored in bf16 in fp32 at bf16's memory cost (so there fp32 is both exact and,
at batch 1, faster than oneDNN's bf16: BENCHMARKS.md, "A verify that costs what
the memory bus says"), and that CUDA, when present, is preferred.
Does not know: anything about decoding.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from speculab import native
from speculab.cpu import cpu_has_native_bf16
from speculab.models.embedded import resolve_model_path
from speculab.models.llama import Transformer
from speculab.models.loading import load_model
from speculab.models.tokenizer import Tokenizer

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
KV_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # what the native loop writes and reads


def add_model_flags(parser, device: bool = True, dtype: bool = True) -> None:
    """``--model`` (``--target`` too), ``--dtype`` and ``--device`` as every command that loads or names a target
    declares them; ``load`` reads them. ``dtype=False``: the command fixes the dtype (training: fp32) or has its own
    (``speculab launch``: the launched engine's)."""
    parser.add_argument(
        "--model",
        "--target",
        dest="model",
        default=None,
        help="the target: a local HF checkpoint folder (default: the embedded SmolLM2-135M-Instruct)",
    )
    if dtype:
        parser.add_argument(
            "--dtype",
            choices=list(DTYPES),
            default=None,
            help="default: fp32 for a bf16 checkpoint where speculab's native kernels are built (exact, bf16's memory "
            "traffic), else bf16 on CUDA or a CPU with AMX/AVX512-BF16, else fp32",
        )
        parser.add_argument(
            "--kv-dtype",
            choices=list(KV_DTYPES),
            default=None,
            help="the KV cache's dtype (default: the model's). bfloat16 under fp32 activations halves the cache's memory "
            "and the bytes each step reads; with AMX the attention then runs on the tiles. Greedy outputs agree with an "
            "fp32 cache's up to near-ties (BENCHMARKS.md, the bf16 KV cache)",
        )
    if device:
        parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def hardware_dtype(device: str | None = None) -> str:
    """The dtype the device computes natively: bf16 on CUDA and on CPUs with AMX or AVX512-BF16, fp32 elsewhere.

    What a peer engine (vLLM's CPU build) is run in.
    """
    device = device or default_device()
    return "bfloat16" if device.startswith("cuda") or cpu_has_native_bf16() else "float32"


def stored_in_bf16(model_path: Path) -> bool:
    """True when the checkpoint's config says its weights are bf16 (``dtype``, or the older ``torch_dtype``)."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return (config.get("dtype") or config.get("torch_dtype")) == "bfloat16"


def default_dtype(device: str | None = None, model_path: str | Path | None = None) -> str:
    """speculab's dtype for a model: fp32 on a CPU where the native kernels run a bf16 checkpoint, else ``hardware_dtype``.

    On a CPU with the native kernels built, a bf16 checkpoint runs in fp32 with its weights read as bf16: greedy
    output exact and, at batch 1, faster than oneDNN's bf16 path (which AMX makes the faster one for many rows at
    once: large batches times long verifies). ``model_path`` None is the embedded model.
    """
    device = device or default_device()
    if device == "cpu" and native.kernels() is not None and stored_in_bf16(resolve_model_path(model_path)):
        return "float32"
    return hardware_dtype(device)


@dataclass
class LoadedModel:
    model: Transformer
    tokenizer: Tokenizer
    path: Path
    dtype: str
    device: str
    kv_dtype: str | None = None  # the KV cache's dtype; None: the model's


def load(
    model_path: str | Path | None = None, dtype: str | None = None, device: str | None = None, kv_dtype: str | None = None
) -> LoadedModel:
    """Load a checkpoint folder (or the embedded default) with its tokenizer; ``kv_dtype`` (None: ``dtype``) is the
    dtype of every KV cache the model makes (``Transformer.kv_dtype``)."""
    device = device or default_device()
    dtype = dtype or default_dtype(device, model_path)
    path = resolve_model_path(model_path)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown KV cache dtype {kv_dtype!r}; choose one of {', '.join(KV_DTYPES)}")
    if dtype == "bfloat16" and device == "cpu" and not cpu_has_native_bf16():
        print(
            "[speculab] note: this CPU has no AMX/AVX512-BF16; bf16 is emulated and multi-token forwards "
            "(prefill, verification) are slow. float32 is faster here.",
            file=sys.stderr,
        )
    model = load_model(path, DTYPES[dtype], device)
    tokenizer = Tokenizer(path)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"{path}: tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is {model.config.vocab_size}")
    model.kv_dtype = KV_DTYPES[kv_dtype] if kv_dtype else None
    return LoadedModel(model, tokenizer, path, dtype, device, kv_dtype or dtype)
