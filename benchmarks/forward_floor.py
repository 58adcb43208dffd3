"""A target forward against this machine's floor: T(q)/T(1), the share of the floor, and where the time goes.

In one run, interleaved, medians of ``--repeats`` with [min, max], after a 1,200-token context per row:
- ``native-amx``: speculab's fp32 path with the AMX linear kernel (``bf16_linear_amx.cpp``; the default where the
  CPU has AMX) and the AVX512 attention, only where the CPU has AMX;
- ``native-avx512``: speculab's fp32 path on a bf16 checkpoint (the default where the native kernels are built),
  with the AVX512 kernels (``bf16_linear_avx512.cpp``, ``attention_avx512.cpp``) where the CPU has AVX512F;
- ``native-avx2``: the same path with the AVX2 kernels (what a CPU without AVX512F runs);
- ``onednn-bf16``: bf16 with oneDNN's packed matmuls and the Python layer loop (``--dtype bfloat16``;
  the default on AMX/AVX512-BF16 CPUs without the native kernels built), only where the CPU computes bf16 natively.
For each batch size and q: the forward's ms, T(q)/T(1), and the memory floor of ``machine_floor.py`` (weights once
plus every row's K/V over the bandwidth measured in this run) as a share of the forward. For the native variants,
the breakdown: every linear of the model on the step's rows alone (the weights' share), the attention over the
model's layers alone (the K/V share), and the rest (norms, RoPE, SiLU, embedding, Python, allocation).
Usage: python benchmarks/forward_floor.py [--repeats 5] [--batch-sizes 1 16] [--qs 1 4 8 16]. The last stdout line
is one JSON document.
"""

import argparse
import json
import statistics
import sys

import torch
from batch_verify_cost import CONTEXT, measure_runs  # this script's folder is on sys.path
from machine_floor import forward_shape, read_bandwidth_gbs, timed

from speculab.cpu import cpu_flags, cpu_has_native_bf16, reported_cpu_flags
from speculab.models.linear import linear_kind
from speculab.runtime import load


def attention_ms(model, batch: int, q: int, repeats: int) -> float:
    """Median ms of the native attention alone over the model's layers' caches (1,200 tokens of context), q rows each."""
    kernels, c = model.native_layers.kernels, model.config
    cache = torch.randn(c.num_layers, batch, 2 * c.num_kv_heads, CONTEXT + q, c.head_dim)
    group = c.num_heads // c.num_kv_heads
    query = torch.randn(batch, c.num_kv_heads, group * q, c.head_dim)
    mask = torch.zeros(batch, 1, group * q, CONTEXT + q)

    def attention():
        for layer in cache:
            kernels.cached_attention(query, layer[:, : c.num_kv_heads], layer[:, c.num_kv_heads :], mask)

    return statistics.median(timed(attention, repeats)) * 1e3


def parts_ms(model, batch: int, q: int, repeats: int) -> dict[str, float]:
    """Median ms of the model's linears alone, and of its attention alone, on the rows of one (batch, q) step."""
    kernels, c = model.native_layers.kernels, model.config
    rows = batch * q
    x, wide = torch.randn(rows, c.hidden_size), torch.randn(rows, c.intermediate_size)
    width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim

    def linears():
        for p in model.native_layers.params:
            kernels.linear(x, p[1], width, None)
            kernels.linear(x, p[3], c.hidden_size, None, x)
            kernels.linear(x, p[5], 2 * c.intermediate_size, None)
            kernels.linear(wide, p[6], c.hidden_size, None, x)
        model.lm_head(x)

    return {"linears": statistics.median(timed(linears, repeats)) * 1e3, "attention": attention_ms(model, batch, q, repeats)}


def variant_models() -> dict[str, object]:
    """The models to set side by side; "native" packs its weights for the FMA kernels (the AVX512 and AVX2 variants)."""
    models = {"native": load(None, "float32").model}
    kernels = models["native"].native_layers.kernels if models["native"].native_layers is not None else None
    if kernels is not None and kernels.amx_in_use():
        models["native-amx"] = models["native"]
        kernels.use_amx(False)
        models["native"] = load(None, "float32").model
        kernels.use_amx(True)
    if cpu_has_native_bf16():
        models["onednn-bf16"] = load(None, "bfloat16").model
    return models


def run_variant(name: str, model, args, floors: dict[int, float]) -> list[dict]:
    cells = []
    for b in args.batch_sizes:
        runs = measure_runs(model, b, args.qs, args.repeats)
        one = statistics.median(runs[1])
        for q in args.qs:
            ms = statistics.median(runs[q])
            cell = {
                "variant": name,
                "batch_size": b,
                "q": q,
                "ms": round(ms, 2),
                "min": round(min(runs[q]), 2),
                "max": round(max(runs[q]), 2),
            }
            cell |= {"relative": round(ms / one, 3), "share_of_floor": round(floors[b] / ms, 3)}
            if model.native_layers is not None:
                parts = parts_ms(model, b, q, args.repeats)
                cell |= {f"{k}_ms": round(v, 2) for k, v in parts.items()} | {"rest_ms": round(ms - sum(parts.values()), 2)}
            cells.append(cell)
            print(cell, file=sys.stderr)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--qs", type=int, nargs="+", default=[1, 4, 8, 16])
    args = parser.parse_args()
    assert args.qs[0] == 1, "the first q must be 1: the others are stated relative to it"
    models = variant_models()
    native = models["native"]
    variants = [("native-amx", 4, models["native-amx"])] if "native-amx" in models else []
    variants += [("native-avx512", 4, native)] if "avx512f" in cpu_flags() else []
    variants.append(("native-avx2", 4, native))
    if "onednn-bf16" in models:
        variants.append(("onednn-bf16", 2, models["onednn-bf16"]))
    kinds = {}
    cells = []
    bandwidth = statistics.median(read_bandwidth_gbs(1 << 30, 5))  # once, so every variant is set against one floor
    for name, kv_bytes, model in variants:
        if model.native_layers is not None:
            model.native_layers.kernels.use_avx512(name != "native-avx2")
        kinds[name] = linear_kind(model)
        shape = forward_shape(model.config, CONTEXT, kv_bytes, 2)
        floors = {b: (shape["weight_bytes"] + b * shape["kv_bytes_per_sequence"]) / bandwidth / 1e6 for b in args.batch_sizes}
        print(f"{name}: {kinds[name]}, {bandwidth:.1f} GB/s, floors {floors}", file=sys.stderr)
        cells += [
            c | {"bandwidth_gbs": round(bandwidth, 2), "floor_ms": round(floors[c["batch_size"]], 2)}
            for c in run_variant(name, model, args, floors)
        ]
    if native.native_layers is not None:
        native.native_layers.kernels.use_avx512(True)
    print(
        json.dumps(
            {
                "cpu_flags": reported_cpu_flags(),
                "threads": torch.get_num_threads(),
                "context": CONTEXT,
                "linear_kernels": kinds,
                "cells": cells,
            }
        )
    )


if __name__ == "__main__":
    main()
