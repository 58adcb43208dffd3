"""Cost of one target forward over q new tokens after a 1,200-token context, relative to q = 1.

This is what bounds speculation: a verify step over q draft nodes costs forward(q), and pays
only if τ · forward(1) > forward(q) + drafting. Usage: python benchmarks/forward_cost.py [dtype ...].
Medians of 12 per q, interleaved; the last stdout line is one JSON document.
"""

import json
import statistics
import sys
import time

import torch

from speculab.models.llama import causal_batch, prefill
from speculab.runtime import load

QS = (1, 4, 16, 26)


def main() -> None:
    results = {}
    for dtype in sys.argv[1:] or ["float32", "bfloat16"]:
        model = load(None, dtype).model
        cache = model.new_cache(1, 1300)
        context = torch.randint(0, model.config.vocab_size, (1200,)).tolist()
        prefill(model, cache, 0, context)
        times: dict[int, list[float]] = {q: [] for q in QS}
        for _ in range(12):
            for q in QS:
                batch = causal_batch(torch.arange(1), torch.tensor([1200]), q)
                start = time.perf_counter()
                model(torch.tensor([context[:q]]), batch, cache)
                times[q].append(time.perf_counter() - start)
        ms = {q: statistics.median(t) * 1e3 for q, t in times.items()}
        results[dtype] = {"ms": ms, "relative": {q: ms[q] / ms[1] for q in QS}}
        print(dtype, {q: f"{ms[q]:.1f} ms ({ms[q] / ms[1]:.2f}x)" for q in QS}, file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
