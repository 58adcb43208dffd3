"""Cost of oneDNN's prepacked fp32 linear by batch hint (packed layout) and by rows per call.

Why it exists: ``mkldnn._reorder_linear_weight(w, batch_hint)`` picks the packed layout. With a hint
of 1 oneDNN chooses a GEMV layout and reorders the weight again on every call with more rows, which
made every verify step and every batched decode step pay 2-3x for its matmuls. This script measures
the SmolLM2-135M shapes (hot in cache: it isolates the kernel, not memory bandwidth).
Usage: python benchmarks/linear_pack.py. Medians of 20; the last stdout line is one JSON document.
"""

import json
import statistics
import sys
import time

import torch

SHAPES = {"lm_head": (49152, 576), "gate_up": (3072, 576), "down": (576, 1536), "qkv": (960, 576)}
HINTS = (1, 2, 16)
ROWS = (1, 2, 4, 8, 16, 32)


def median_ms(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.manual_seed(0)
    results: dict[str, dict[str, dict[int, float]]] = {}
    for name, (out_features, in_features) in SHAPES.items():
        weight = torch.randn(out_features, in_features)
        results[name] = {}
        for hint in HINTS:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, hint)
            row = {}
            for rows in ROWS:
                x = torch.randn(rows, in_features)
                row[rows] = median_ms(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
            results[name][f"hint_{hint}"] = row
            print(name, f"hint {hint}:", " ".join(f"M={m}: {v:.2f} ms" for m, v in row.items()), file=sys.stderr)
    print(json.dumps({"threads": torch.get_num_threads(), "ms": results}))


if __name__ == "__main__":
    main()
