"""What a verify step costs at each batch size: one target forward over q tokens per request.

Every request has a 1,200-token context. For batch size B, a verify of q tokens per request costs
forward(B, q); with a perfect, free drafter a step then emits q tokens per request, so
q · forward(B, 1) / forward(B, q) is the most speculation can gain at that batch size on this
machine (the ceiling). Usage: python benchmarks/batch_verify_cost.py [--batch-sizes 1 4 16]
[--qs 1 2 3 4 8] [--repeats 7] [--dtype float32]. Medians of interleaved repeats with [min, max]; the last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from speculab.cpu import reported_cpu_flags
from speculab.models.linear import linear_kind
from speculab.models.llama import causal_batch, prefill
from speculab.runtime import load

CONTEXT = 1200


def measure(model, batch_size: int, qs: list[int], repeats: int) -> dict[int, float]:
    """Median ms of a forward over q tokens per row, for each q."""
    return {q: statistics.median(t) for q, t in measure_runs(model, batch_size, qs, repeats).items()}


def measure_runs(model, batch_size: int, qs: list[int], repeats: int) -> dict[int, list[float]]:
    """Every repeat's ms for each q (interleaved across q, after one warm-up round)."""
    cache = model.new_cache(batch_size, CONTEXT + max(qs) + 8)
    context = torch.randint(0, model.config.vocab_size, (CONTEXT,)).tolist()
    for slot in range(batch_size):
        prefill(model, cache, slot, context)
    rows, start = torch.arange(batch_size), torch.full((batch_size,), CONTEXT)
    times: dict[int, list[float]] = {q: [] for q in qs}
    for _ in range(repeats + 1):  # the first round warms up
        for q in qs:
            batch = causal_batch(rows, start, q)
            tokens = torch.tensor([context[:q]] * batch_size)
            began = time.perf_counter()
            model(tokens, batch, cache)
            times[q].append(time.perf_counter() - began)
    return {q: [x * 1e3 for x in t[1:]] for q, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--qs", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    model = load(None, args.dtype).model
    results = []
    for b in args.batch_sizes:
        runs = measure_runs(model, b, args.qs, args.repeats)
        ms = {q: statistics.median(t) for q, t in runs.items()}
        for q in args.qs:
            row = {
                "batch_size": b,
                "q": q,
                "ms": round(ms[q], 2),
                "min": round(min(runs[q]), 2),
                "max": round(max(runs[q]), 2),
                "relative": round(ms[q] / ms[1], 3),
                "ceiling_speedup": round(q * ms[1] / ms[q], 3),
            }
            results.append(row)
            print(row, file=sys.stderr)
    record = {"dtype": args.dtype, "cpu_flags": reported_cpu_flags(), "linear_kernels": linear_kind(model), "context": CONTEXT}
    print(json.dumps(record | {"threads": torch.get_num_threads(), "results": results}))


if __name__ == "__main__":
    main()
