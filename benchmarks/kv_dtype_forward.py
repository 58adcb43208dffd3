"""The target forward with an fp32 KV cache against the same forward with a bf16 one, paired.

Knows: one copy of the embedded model (fp32 activations on the native kernels), its cache made in each dtype in turn
(``Transformer.kv_dtype``), timed alternately round after round so the guest's drift falls on both alike; per
(batch, q), 1,200 tokens of context a row: each cache dtype's median ms, the median of the per-round ratios
bf16 / fp32 with their [min, max], and T(q)/T(1) at batch 1 for each. With AMX the bf16 cache runs the attention
on the tiles (``attention_amx.cpp``); without, it is widened to fp32 for the fp32 kernels (slower: a check only).
Does not know: agreement of the two caches' outputs (``speculab divergence``-style checks do that).
Usage: python benchmarks/kv_dtype_forward.py [--rounds 5] [--repeats 3]. The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys

import torch
from batch_verify_cost import CONTEXT, measure_runs  # this script's folder is on sys.path
from paired_rounds import paired_cells, relative_at_batch_1

from speculab import native
from speculab.cpu import reported_cpu_flags
from speculab.models.linear import linear_kind
from speculab.runtime import load

CELLS = {1: [1, 4, 8, 16], 16: [1, 4]}  # batch size -> tokens per row
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = load(None, "float32").model
    runs = {(name, b, q): [] for name in DTYPES for b, qs in CELLS.items() for q in qs}
    for r in range(args.rounds):
        for name in ("bf16", "fp32") if r % 2 == 0 else ("fp32", "bf16"):
            model.kv_dtype = DTYPES[name]
            for b, qs in CELLS.items():
                for q, times in measure_runs(model, b, qs, args.repeats).items():
                    runs[(name, b, q)].append(statistics.median(times))
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    cells = paired_cells(runs, CELLS, "bf16", "fp32")
    relative = relative_at_batch_1(runs, CELLS[1], DTYPES)
    print(f"T(q)/T(1) at batch 1: {relative}", file=sys.stderr)
    kernels = native.kernels()
    record = {"cpu_flags": reported_cpu_flags(), "context": CONTEXT, "linear_kernels": linear_kind(model)}
    record["amx_attention"] = bool(kernels is not None and kernels.amx_in_use())
    print(json.dumps(record | {"cells": cells, "relative": relative}))


if __name__ == "__main__":
    main()
