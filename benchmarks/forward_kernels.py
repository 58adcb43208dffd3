"""Where a target forward's time goes, and what the native kernel changes: ms per forward, PyTorch path vs native.

For batch sizes 1, 4, 16 and q = 1, 4, 16 new tokens per row after a 1,200-token context (logits at every
position, as a verify computes them), the embedded model in fp32 is timed three ways, each change on top of
the one before: ``pytorch`` (oneDNN-packed fp32 weights, the Python layer loop: ``SPECULAB_NATIVE=0``),
``native-linear`` (``native/bf16_linear.cpp``: the bf16 checkpoint's weights widened exactly in the kernel),
``native`` (plus the C++ layer loop, ``native/layers.cpp``, and for q <= 8 the native attention,
``native/attention.cpp``). The same run measures the machine's read bandwidth (a sum over a
1 GiB tensor), so the batch-1 step is set against its floor (weight bytes / bandwidth), and profiles one
batch-1 step on the native path (the ops that take the time). Usage: python benchmarks/forward_kernels.py
[--repeats 5]. Medians with [min, max]; the last stdout line is one JSON document.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
from batch_verify_cost import CONTEXT, measure_runs  # this script's folder is on sys.path

from speculab import native
from speculab.cpu import reported_cpu_flags
from speculab.models.llama import causal_batch, prefill
from speculab.runtime import load

BATCHES, QS = (1, 4, 16), (1, 4, 16)


def read_bandwidth_gbs(repeats: int = 5) -> float:
    """GB/s of streaming reads: a sum over 1 GiB of fp32 on all threads (median of ``repeats``)."""
    data = torch.ones(1 << 28)
    data.sum()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - began)
    return data.numel() * 4 / statistics.median(times) / 1e9


def weight_bytes(model) -> int:
    """Bytes a one-token forward reads from weights: every linear's storage (packed or not) plus the final norm."""
    total = 0
    for module in model.modules():
        for name in ("weight", "packed", "bias"):
            t = getattr(module, name, None)
            if isinstance(t, torch.Tensor) and module is not model.embed_tokens:
                total += t.numel() * t.element_size()
    return total


VARIANTS = ("pytorch", "native-linear", "native")


def load_on(variant: str):
    os.environ["SPECULAB_NATIVE"] = "0" if variant == "pytorch" else "1"
    native.kernels.cache_clear()
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
        began = time.perf_counter()
        for _ in range(5):
            model(tokens, batch, cache)
        wall_ms = (time.perf_counter() - began) / 5 * 1e3
    events = prof.key_averages()
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    table = [{"op": e.key, "calls_per_step": e.count // 5, "self_ms_per_step": round(e.self_cpu_time_total / 5e3, 3)} for e in rows]
    # speculab's own kernels are not ATen ops: their time is what the profiler attributes to no op
    attributed = sum(e.self_cpu_time_total for e in events) / 5e3
    return table + [
        {"op": "(native kernels and Python: not ATen ops)", "calls_per_step": None, "self_ms_per_step": round(wall_ms - attributed, 3)}
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bandwidth = read_bandwidth_gbs()
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
    print(
        json.dumps(
            {
                "cpu_flags": reported_cpu_flags(),
                "threads": torch.get_num_threads(),
                "context": CONTEXT,
                "read_bandwidth_gbs": round(bandwidth, 2),
                "weight_floor_ms": {k: round(v, 2) for k, v in floors.items()},
                "share_of_floor_at_batch_1": {k: round(floors[k] / step[k], 3) for k in floors},
                "cells": cells,
                "speedups": speedups,
                "native_profile_batch_1": profile,
            }
        )
    )


if __name__ == "__main__":
    main()
