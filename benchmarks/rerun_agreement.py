"""Do two runs of ``speculab bench`` agree? Each method's speedup at each batch size, side by side.

Usage: ``python benchmarks/rerun_agreement.py RUN_A/results.jsonl RUN_B/results.jsonl [--tolerance 0.10]``
(e.g. two ``make bench`` runs of one commit on one machine). For every method and batch size both runs measured, the
speedup over the baseline as the report computes it (``speculab.bench.report``: the median of per-round ratios where
the cells ran in rounds), and B's over A's. The last stdout line is one JSON document: every pair, the largest
disagreement, and whether every pair at the batch sizes checked (default: the smallest and the largest) is within the
tolerance.

Knows: the report's speedup. Does not know: how the runs were made.
"""

from __future__ import annotations

import argparse
import json

from speculab.bench.report.results import load_results


def pairs(path_a: str, path_b: str) -> list[dict]:
    """(label, batch size, speedup in A, speedup in B, B / A) for every speculative cell both runs have."""
    a, b = load_results(path_a), load_results(path_b)
    found = []
    for label in a.labels:
        if a.is_baseline(label) or label not in b.labels:
            continue
        for batch in a.batches_of(label):
            sa, sb = a.measured_speedup(label, batch), b.measured_speedup(label, batch)
            if sa is None or sb is None:
                continue
            found.append(
                {
                    "label": a.short(label),
                    "batch_size": batch,
                    "a": round(sa.value, 3),
                    "b": round(sb.value, 3),
                    "a_range": [sa.low, sa.high],
                    "b_range": [sb.low, sb.high],
                    "b_over_a": round(sb.value / sa.value, 3),
                }
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--tolerance", type=float, default=0.10, help="the largest |B/A - 1| that counts as agreeing")
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=None, help="checked (default: the smallest and largest)")
    args = parser.parse_args()
    found = pairs(args.a, args.b)
    sizes = sorted({p["batch_size"] for p in found})
    checked = set(args.batch_sizes) if args.batch_sizes else {sizes[0], sizes[-1]} if sizes else set()
    for p in found:
        mark = "checked" if p["batch_size"] in checked else ""
        print(f"{p['label']:>16s} b{p['batch_size']:<3d} A {p['a']:.3f}x  B {p['b']:.3f}x  B/A {p['b_over_a']:.3f} {mark}")
    within = [abs(p["b_over_a"] - 1) <= args.tolerance for p in found if p["batch_size"] in checked]
    worst = max((abs(p["b_over_a"] - 1) for p in found if p["batch_size"] in checked), default=None)
    summary = {"pairs": found, "checked_batch_sizes": sorted(checked), "tolerance": args.tolerance, "largest_disagreement": worst}
    print(json.dumps(summary | {"all_within": bool(within) and all(within)}))


if __name__ == "__main__":
    main()
