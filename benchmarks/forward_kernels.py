"""Whole target forwards, one kernel choice against another: the PyTorch path against the native kernels, the AMX
linear kernel against the AVX512 FMA one, and an fp32 KV cache against a bf16 one.

Subcommands (``--help`` on each says more):
- ``native``: ms a forward on the PyTorch path, with the native linear, and fully native; the batch-1 step against
  its weight floor; a profile of one native step;
- ``amx``: the AMX linear kernel against the AVX512 FMA kernel, paired round by round (needs AMX);
- ``kv-dtype``: an fp32 KV cache against a bf16 one, paired round by round.
Knows: the embedded model in fp32 after 1,200 tokens of context a row; the paired subcommands time their variants
alternately (ABBA), so the guest's drift of speed falls on both alike, and report the median of per-round ratios.
Does not know: a kernel alone (``kernels_alone.py``), the machine's floor (``forward.py``), outputs' agreement (``bf16.py``).
Usage: python benchmarks/forward_kernels.py COMMAND [options]. The last stdout line is one JSON document.
"""

import json
import os
import statistics
import sys

import torch
from common import (
    CONTEXT,
    PAIRED_CELLS,
    clocked,
    command_line,
    measure_runs,
    paired_cells,
    paired_forwards,
    read_bandwidth_gbs,
    relative_at_batch_1,
    run_subcommand,
    subcommand,
)

from speculab import native as native_kernels
from speculab.cpu import reported_cpu_flags
from speculab.models.linear import linear_kind
from speculab.models.llama import causal_batch, prefill
from speculab.runtime import load

BATCHES, QS = (1, 4, 16), (1, 4, 16)
VARIANTS = ("pytorch", "native-linear", "native")
KV_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def weight_bytes(model) -> int:
    """Bytes a one-token forward reads from weights: every linear's storage (packed or not) plus the final norm."""
    total = 0
    for module in model.modules():
        for name in ("weight", "packed", "bias"):
            t = getattr(module, name, None)
            if isinstance(t, torch.Tensor) and module is not model.embed_tokens:
                total += t.numel() * t.element_size()
    return total


def load_on(variant: str):
    os.environ["SPECULAB_NATIVE"] = "0" if variant == "pytorch" else "1"
    native_kernels.kernels.cache_clear()
    model = load(None, "float32").model
    if variant == "native-linear":
        model.native_layers = None
    return model


def profile_step(model, top: int = 12) -> list[dict]:
    """The ops of one batch-1, one-token forward by self CPU time."""
    cache = model.new_cache(1, CONTEXT + 8)
    prefill(model, cache, 0, list(range(3, CONTEXT + 3)))
    tokens, batch = torch.tensor([[5]]), causal_batch(torch.arange(1), torch.tensor([CONTEXT]), 1)
    model(tokens, batch, cache)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _, seconds = clocked(lambda: [model(tokens, batch, cache) for _ in range(5)])
    wall_ms = seconds / 5 * 1e3
    events = prof.key_averages()
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    table = [{"op": e.key, "calls_per_step": e.count // 5, "self_ms_per_step": round(e.self_cpu_time_total / 5e3, 3)} for e in rows]
    # speculab's own kernels are not ATen ops: their time is what the profiler attributes to no op
    attributed = sum(e.self_cpu_time_total for e in events) / 5e3
    return table + [
        {"op": "(native kernels and Python: not ATen ops)", "calls_per_step": None, "self_ms_per_step": round(wall_ms - attributed, 3)}
    ]


def native(args) -> None:
    """Where a target forward's time goes, and what the native kernel changes: ms per forward, PyTorch path vs native.

    For batch sizes 1, 4, 16 and q = 1, 4, 16 new tokens per row after a 1,200-token context (logits at every
    position, as a verify computes them), the embedded model in fp32 is timed three ways, each change on top of
    the one before: ``pytorch`` (oneDNN-packed fp32 weights, the Python layer loop: ``SPECULAB_NATIVE=0``),
    ``native-linear`` (``native/bf16_linear.cpp``: the bf16 checkpoint's weights widened exactly in the kernel),
    ``native`` (plus the C++ layer loop, ``native/layers.cpp``, and for q <= 8 the native attention,
    ``native/attention.cpp``). The same run measures the machine's read bandwidth (a sum over a 1 GiB tensor), so the
    batch-1 step is set against its floor (weight bytes / bandwidth), and profiles one batch-1 step on the native
    path (the ops that take the time). Medians with [min, max].
    """
    bandwidth = statistics.median(read_bandwidth_gbs(1 << 30, 5))
    print(f"read bandwidth {bandwidth:.1f} GB/s", file=sys.stderr)
    cells, floors = [], {}
    for variant in VARIANTS:
        model = load_on(variant)
        floors[variant] = weight_bytes(model) / bandwidth / 1e6
        for b in BATCHES:
            runs = measure_runs(model, b, list(QS), args.repeats)
            for q in QS:
                ms = runs[q]
                cell = {"variant": variant, "batch_size": b, "q": q, "ms": round(statistics.median(ms), 2)}
                cells.append(cell | {"min": round(min(ms), 2), "max": round(max(ms), 2)})
                print(cells[-1], file=sys.stderr)
        if variant == "native":
            profile = profile_step(model)
        del model
    by = {(c["variant"], c["batch_size"], c["q"]): c["ms"] for c in cells}
    speedups = [
        {"batch_size": b, "q": q} | {f"{v}_vs_pytorch": round(by["pytorch", b, q] / by[v, b, q], 2) for v in VARIANTS[1:]}
        for b in BATCHES
        for q in QS
    ]
    step = {k: by[k, 1, 1] for k in floors}
    record = {"cpu_flags": reported_cpu_flags(), "threads": torch.get_num_threads(), "context": CONTEXT}
    record |= {"read_bandwidth_gbs": round(bandwidth, 2), "weight_floor_ms": {k: round(v, 2) for k, v in floors.items()}}
    record["share_of_floor_at_batch_1"] = {k: round(floors[k] / step[k], 3) for k in floors}
    print(json.dumps(record | {"cells": cells, "speedups": speedups, "native_profile_batch_1": profile}))


def amx(args) -> None:
    """The target forward on the AMX linear kernel against the same forward on the AVX512 FMA kernel, paired.

    Knows: two copies of the embedded model in one process, one packed for each kernel (``kernels.use_amx`` decides at
    packing; the attention and everything else are the same code), timed alternately round after round; per
    (batch, q): each kernel's median ms and the median of the per-round ratios AMX / FMA with their [min, max], and
    T(q)/T(1) at batch 1 for each kernel. Does not know: other CPUs (it needs AMX; elsewhere it says so and stops).
    """
    kernels = native_kernels.kernels()
    if kernels is None or not kernels.amx_in_use():
        sys.exit("forward_kernels.py amx: needs the native kernels on a CPU with AMX (SPECULAB_AMX unset)")
    kernels.use_amx(False)
    fma = load(None, "float32").model
    kernels.use_amx(True)
    models = {"amx": load(None, "float32").model, "fma": fma}
    runs = paired_forwards({name: (lambda m=m: m) for name, m in models.items()}, args.rounds, args.repeats)
    cells = paired_cells(runs, PAIRED_CELLS, "amx", "fma")
    relative = relative_at_batch_1(runs, PAIRED_CELLS[1], models)
    print(f"T(q)/T(1) at batch 1: {relative}", file=sys.stderr)
    kinds = {n: linear_kind(m) for n, m in models.items()}
    print(
        json.dumps({"cpu_flags": reported_cpu_flags(), "context": CONTEXT, "linear_kernels": kinds, "cells": cells, "relative": relative})
    )


def kv_dtype(args) -> None:
    """The target forward with an fp32 KV cache against the same forward with a bf16 one, paired.

    Knows: one copy of the embedded model (fp32 activations on the native kernels), its cache made in each dtype in
    turn (``Transformer.kv_dtype``), timed alternately round after round; per (batch, q), 1,200 tokens of context a
    row: each cache dtype's median ms, the median of the per-round ratios bf16 / fp32 with their [min, max], and
    T(q)/T(1) at batch 1 for each. With AMX the bf16 cache runs the attention on the tiles (``attention_amx.cpp``);
    without, it is widened to fp32 for the fp32 kernels (slower: a check only).
    Does not know: agreement of the two caches' outputs (``bf16.py kv-agreement``).
    """
    model = load(None, "float32").model

    def with_cache(dtype):
        model.kv_dtype = dtype
        return model

    # bf16 first in each even round, as the runs BENCHMARKS.md cites took them
    runs = paired_forwards({name: (lambda d=KV_DTYPES[name]: with_cache(d)) for name in ("bf16", "fp32")}, args.rounds, args.repeats)
    cells = paired_cells(runs, PAIRED_CELLS, "bf16", "fp32")
    relative = relative_at_batch_1(runs, PAIRED_CELLS[1], KV_DTYPES)
    print(f"T(q)/T(1) at batch 1: {relative}", file=sys.stderr)
    kernels = native_kernels.kernels()
    record = {"cpu_flags": reported_cpu_flags(), "context": CONTEXT, "linear_kernels": linear_kind(model)}
    record["amx_attention"] = bool(kernels is not None and kernels.amx_in_use())
    print(json.dumps(record | {"cells": cells, "relative": relative}))


def main() -> None:
    parser, sub = command_line(__doc__)
    subcommand(sub, "native", native).add_argument("--repeats", type=int, default=5)
    for name, run in (("amx", amx), ("kv-dtype", kv_dtype)):
        p = subcommand(sub, name, run)
        p.add_argument("--rounds", type=int, default=5)
        p.add_argument("--repeats", type=int, default=3)
    run_subcommand(parser)


if __name__ == "__main__":
    main()
