"""The target forward on the AMX linear kernel against the same forward on the AVX512 FMA kernel, paired.

Knows: two copies of the embedded model in one process, one packed for each kernel (``kernels.use_amx`` decides at
packing; the attention and everything else are the same code), timed alternately round after round so that the
guest's drift of speed falls on both alike; per (batch, q): each kernel's median ms and the median of the per-round
ratios AMX / FMA with their [min, max], and T(q)/T(1) at batch 1 for each kernel.
Does not know: other CPUs (it needs AMX; elsewhere it says so and stops).
Usage: python benchmarks/amx_forward.py [--rounds 5] [--repeats 3]. The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys

from batch_verify_cost import CONTEXT, measure_runs  # this script's folder is on sys.path
from paired_rounds import paired_cells, relative_at_batch_1

from speculab import native
from speculab.cpu import reported_cpu_flags
from speculab.models.linear import linear_kind
from speculab.runtime import load

CELLS = {1: [1, 4, 8, 16], 16: [1, 4]}  # batch size -> tokens per row


def load_both():
    """The embedded model twice: packed for the AMX kernel and for the FMA one (use_amx decides at packing)."""
    kernels = native.kernels()
    if kernels is None or not kernels.amx_in_use():
        sys.exit("amx_forward: needs the native kernels on a CPU with AMX (SPECULAB_AMX unset)")
    kernels.use_amx(False)
    fma = load(None, "float32").model
    kernels.use_amx(True)
    return {"amx": load(None, "float32").model, "fma": fma}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    models = load_both()
    runs = {(name, b, q): [] for name in models for b, qs in CELLS.items() for q in qs}
    for r in range(args.rounds):
        for name in ("amx", "fma") if r % 2 == 0 else ("fma", "amx"):
            for b, qs in CELLS.items():
                for q, times in measure_runs(models[name], b, qs, args.repeats).items():
                    runs[(name, b, q)].append(statistics.median(times))
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    cells = paired_cells(runs, CELLS, "amx", "fma")
    relative = relative_at_batch_1(runs, CELLS[1], models)
    print(f"T(q)/T(1) at batch 1: {relative}", file=sys.stderr)
    kinds = {n: linear_kind(m) for n, m in models.items()}
    print(
        json.dumps({"cpu_flags": reported_cpu_flags(), "context": CONTEXT, "linear_kernels": kinds, "cells": cells, "relative": relative})
    )


if __name__ == "__main__":
    main()
