"""The native attention alone over an fp32 cache and over a bf16 one (the AMX tiles where the CPU has them), paired.

Knows: 30 layers' worth of distinct caches (1,200 positions each, so every call reads its keys and values from
memory), the embedded model's heads (9 query, 3 KV, head_dim 64), q new tokens a row: both cache dtypes timed
alternately round after round; per (batch, q) each dtype's median ms over the 30 layers, and the median of the
per-round ratios bf16 / fp32 with their [min, max].
Does not know: the rest of a forward (``kv_dtype_forward.py``).
Usage: python benchmarks/attention_bf16.py [--rounds 7]. The last stdout line is one JSON document.
"""

import argparse
import json
import sys
import time

import torch
from paired_rounds import paired_cells  # this script's folder is on sys.path

from speculab import native
from speculab.cpu import reported_cpu_flags

CELLS = {1: [1, 4, 8, 16], 16: [1, 4]}  # batch size -> tokens per row
LAYERS, CONTEXT, KV_HEADS, GROUP, HEAD_DIM = 30, 1200, 3, 3, 64


def layers_ms(kernels, caches, query, mask) -> float:
    began = time.perf_counter()
    for layer in caches:
        kernels.cached_attention(query, layer[:, :KV_HEADS], layer[:, KV_HEADS:], mask)
    return (time.perf_counter() - began) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    kernels = native.kernels()
    if kernels is None:
        sys.exit("attention_bf16: needs the native kernels (make setup)")
    times = {}
    for b, qs in CELLS.items():
        fp32 = [torch.randn(b, 2 * KV_HEADS, CONTEXT, HEAD_DIM) for _ in range(LAYERS)]
        caches = {"fp32": fp32, "bf16": [c.to(torch.bfloat16) for c in fp32]}
        for q in qs:
            query, mask = torch.randn(b, KV_HEADS, GROUP * q, HEAD_DIM), torch.zeros(b, 1, GROUP * q, CONTEXT)
            for name in caches:
                layers_ms(kernels, caches[name], query, mask)  # warm-up
            for r in range(args.rounds):
                for name in ("bf16", "fp32") if r % 2 == 0 else ("fp32", "bf16"):
                    times.setdefault((name, b, q), []).append(layers_ms(kernels, caches[name], query, mask))
    cells = paired_cells(times, CELLS, "bf16", "fp32")
    record = {"cpu_flags": reported_cpu_flags(), "amx_attention": bool(kernels.attention_amx_available(HEAD_DIM)), "layers": LAYERS}
    print(json.dumps(record | {"context": CONTEXT, "cells": cells}))


if __name__ == "__main__":
    main()
