"""Would AMX pay for the linears here? speculab's fp32 kernels (the AVX512 FMA one and, where the CPU has
AMX, its own AMX one) against oneDNN's prepacked bf16 matmul (AMX where the CPU has it), on two of the model's shapes
(gate|up 3,072 x 576 and down 576 x 1,536), the weights read from memory.

Knows: the time per call of ``kernels.linear`` on FMA-packed weights (fp32 activations, bf16 weights, fp32 FMA
chains) and on AMX-packed ones (``bf16_linear_amx.cpp``: the fp32 product as three bf16 terms on the tiles), of oneDNN's
``_linear_pointwise`` on a bf16 weight reordered once for the row count (bf16 activations: another rounding, so
not a drop-in), and of three oneDNN calls in a row (the arithmetic of an fp32-accurate product split into three
bf16 terms; each call reads the weight again, partly from cache, so this bounds from above a kernel that loads
each weight tile once for the three terms).
Does not know: the whole forward (benchmarks/amx_forward.py sets the two kernels side by side there).
Usage: python benchmarks/amx_probe.py [--rows 1 4 8 16 32 64]. The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from speculab.cpu import reported_cpu_flags
from speculab.runtime import load

SHAPES = ((3072, 576), (576, 1536))  # gate|up and down of the embedded model
WEIGHT_BYTES = 290e6  # copies of each shape, so that every call reads its weight from memory


def per_call_us(fn, weights) -> float:
    began = time.perf_counter()
    for w in weights:
        fn(w)
    return (time.perf_counter() - began) / len(weights) * 1e6


def packed_both(kernels, weights):
    """Each weight packed for the FMA kernels and, where the CPU has AMX, for the AMX kernel."""
    before = kernels.use_amx(False)
    fma = [kernels.pack(w) for w in weights]
    kernels.use_amx(True)
    amx = [kernels.pack(w) for w in weights] if kernels.amx_in_use() else None
    kernels.use_amx(before)
    return fma, amx


def shape_cells(kernels, n: int, k: int, rows_list: list[int]) -> list[dict]:
    weights = [torch.randn(n, k).to(torch.bfloat16) for _ in range(int(WEIGHT_BYTES / (2 * n * k)))]
    fma, amx = packed_both(kernels, weights)
    cells = []
    for rows in rows_list:
        onednn = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in weights]
        x = torch.randn(rows, k)
        xb = x.to(torch.bfloat16)
        fp32 = lambda p: kernels.linear(x, p, n, None)  # noqa: E731
        bf16 = lambda w: torch.ops.mkldnn._linear_pointwise(xb, w, None, "none", [], "")  # noqa: E731
        timed = {"native_fp32_us": (fp32, fma), "onednn_bf16_us": (bf16, onednn)}
        timed["onednn_bf16_three_us"] = (lambda w: [bf16(w) for _ in range(3)], onednn)
        if amx is not None:
            timed["native_amx_fp32_us"] = (fp32, amx)
        runs = {name: [] for name in timed}
        for _ in range(5):  # interleaved
            for name, (fn, packed) in timed.items():
                runs[name].append(per_call_us(fn, packed))
        cell = {"shape": [n, k], "rows": rows} | {name: round(statistics.median(v), 1) for name, v in runs.items()}
        cells.append(cell)
        print(cell, file=sys.stderr)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64])
    args = parser.parse_args()
    kernels = load(None, "float32").model.native_layers.kernels
    cells = [cell for n, k in SHAPES for cell in shape_cells(kernels, n, k, args.rows)]
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "weight_bytes": WEIGHT_BYTES, "cells": cells}))


if __name__ == "__main__":
    main()
