"""Would AMX pay for the linears here? speculab's fp32 kernel against oneDNN's prepacked bf16 matmul (AMX where the
CPU has it), on one of the model's shapes, the weights read from memory.

Knows: the time per call of ``kernels.linear`` (fp32 activations, bf16 weights, fp32 FMA chains) and of oneDNN's
``_linear_pointwise`` on a bf16 weight reordered once for the row count (bf16 activations: another rounding, so
not a drop-in), and of three oneDNN calls in a row (the arithmetic of an fp32-accurate product split into three
bf16 terms; each call reads the weight again, partly from cache, so this bounds from above a kernel that loads
each weight tile once for the three terms).
Does not know: what an own AMX kernel without oneDNN's per-call cost would do (the question this probe frames).
Usage: python benchmarks/amx_probe.py [--rows 1 4 8 16 32]. The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from speculab.cpu import reported_cpu_flags
from speculab.runtime import load

N, K, COPIES = 3072, 576, 84  # gate|up of the embedded model; 84 copies (290 MB) so each call reads memory


def per_call_us(fn, weights) -> float:
    began = time.perf_counter()
    for w in weights:
        fn(w)
    return (time.perf_counter() - began) / len(weights) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    args = parser.parse_args()
    kernels = load(None, "float32").model.native_layers.kernels
    weights = [torch.randn(N, K).to(torch.bfloat16) for _ in range(COPIES)]
    packed = [kernels.pack(w) for w in weights]
    cells = []
    for rows in args.rows:
        onednn = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in weights]
        x = torch.randn(rows, K)
        xb = x.to(torch.bfloat16)
        fp32 = lambda p: kernels.linear(x, p, N, None)  # noqa: E731
        bf16 = lambda w: torch.ops.mkldnn._linear_pointwise(xb, w, None, "none", [], "")  # noqa: E731
        runs = {"native_fp32_us": [], "onednn_bf16_us": [], "onednn_bf16_three_us": []}
        for _ in range(5):  # interleaved
            runs["native_fp32_us"].append(per_call_us(fp32, packed))
            runs["onednn_bf16_us"].append(per_call_us(bf16, onednn))
            runs["onednn_bf16_three_us"].append(per_call_us(lambda w: [bf16(w) for _ in range(3)], onednn))
        cell = {"rows": rows} | {k: round(statistics.median(v), 1) for k, v in runs.items()}
        cells.append(cell)
        print(cell, file=sys.stderr)
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "shape": [N, K], "copies": COPIES, "cells": cells}))


if __name__ == "__main__":
    main()
