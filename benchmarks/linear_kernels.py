"""One linear layer, three ways: the native bf16-weight kernel vs oneDNN-packed fp32 vs F.linear (fp32).

The embedded model's shapes (qkv 960x576, gate|up 3072x576, down 576x1536, lm_head 49152x576) at 1-256
rows; 30 copies of each weight (one for the lm_head) so each call reads its weight from memory, as a
forward does. Also checks the kernel's accuracy against float64 and that each row's result is bit for bit
the same whether it is computed alone or with the others. Usage: python benchmarks/linear_kernels.py
[--repeats 15]. Medians; the last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from speculab import native
from speculab.cpu import reported_cpu_flags
from speculab.models.linear import PackedLinear

SHAPES = {"qkv": (960, 576), "gate_up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}
ROWS = (1, 4, 16, 64, 256)


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    kernels = native.kernels()
    if kernels is None:
        sys.exit(f"native kernels unavailable: {native.disabled_reason() or 'run make setup'}")
    torch.manual_seed(0)
    cells = []
    for name, (n, k) in SHAPES.items():
        copies = 1 if name == "lm_head" else 30
        weights = [torch.randn(n, k).to(torch.bfloat16) for _ in range(copies)]
        packed_native = [kernels.pack(w) for w in weights]
        fp32 = [w.float() for w in weights]
        packed_onednn = []
        for w in fp32:
            linear = torch.nn.Linear(k, n, bias=False).requires_grad_(False)
            linear.weight.copy_(w)
            packed_onednn.append(PackedLinear(linear))
        for m in ROWS:
            x = torch.randn(m, k)
            got = kernels.linear(x, packed_native[0], n, None)
            alone = torch.cat([kernels.linear(x[i : i + 1], packed_native[0], n, None) for i in range(m)])
            reference = (x.double() @ fp32[0].double().T).float()
            cell = {
                "layer": name,
                "out": n,
                "in": k,
                "rows": m,
                "native_ms": median_ms(lambda: [kernels.linear(x, w, n, None) for w in packed_native], args.repeats) / copies,
                "onednn_fp32_ms": median_ms(lambda: [p(x) for p in packed_onednn], args.repeats) / copies,
                "f_linear_fp32_ms": median_ms(lambda: [F.linear(x, w) for w in fp32], args.repeats) / copies,
                "max_abs_error_vs_float64": (got - reference).abs().max().item(),
                "rows_bit_identical_alone": torch.equal(alone, got),
            }
            cell["native_vs_onednn"] = cell["onednn_fp32_ms"] / cell["native_ms"]
            cells.append({key: round(v, 4) if isinstance(v, float) else v for key, v in cell.items()})
            print(cells[-1], file=sys.stderr)
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "threads": torch.get_num_threads(), "cells": cells}))


if __name__ == "__main__":
    main()
