"""Cost of one target forward over q new tokens after a 1,200-token context, relative to q = 1.

This is what bounds speculation: a verify step over q draft nodes costs forward(q), and pays
only if τ · forward(1) > forward(q) + drafting. Usage: python benchmarks/forward_cost.py [dtype ...].
Medians of 12 per q, interleaved, after a warm-up round (``batch_verify_cost.measure``); the last stdout line is one JSON document.
"""

import json
import sys

# the same timing loop as batch_verify_cost.py, at batch size 1 (this script's folder is on sys.path)
from batch_verify_cost import measure

from speculab.runtime import load

QS = (1, 4, 16, 26)


def main() -> None:
    results = {}
    for dtype in sys.argv[1:] or ["float32", "bfloat16"]:
        ms = measure(load(None, dtype).model, 1, list(QS), repeats=12)
        results[dtype] = {"ms": ms, "relative": {q: ms[q] / ms[1] for q in QS}}
        print(dtype, {q: f"{ms[q]:.1f} ms ({ms[q] / ms[1]:.2f}x)" for q in QS}, file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
