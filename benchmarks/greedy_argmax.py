"""The greedy token of each row: torch's CPU argmax against ``sampling.greedy_tokens`` (numpy's), in microseconds.

Rows of the embedded model's 49,152-token vocabulary: 1 (a plain decode step), 4 (a verify of EAGLE's default
tree), 16 (a batch-16 step). Medians of ``--repeats`` rounds of 500 calls with [min, max], the two alternating.
Usage: python benchmarks/greedy_argmax.py [--repeats 7]. The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from speculab.cpu import reported_cpu_flags
from speculab.sampling import greedy_tokens

VOCAB, CALLS = 49152, 500


def per_call_us(fn) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - start) / CALLS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    cells = []
    for rows in (1, 4, 16):
        logits = torch.randn(rows, VOCAB)
        assert greedy_tokens(logits) == logits.argmax(-1).tolist()
        runs = {"torch": [], "greedy_tokens": []}
        for _ in range(args.repeats):
            runs["torch"].append(per_call_us(lambda: logits.argmax(-1).tolist()))
            runs["greedy_tokens"].append(per_call_us(lambda: greedy_tokens(logits)))
        cell = {"rows": rows} | {k: [round(statistics.median(v), 1), round(min(v), 1), round(max(v), 1)] for k, v in runs.items()}
        cells.append(cell)
        print(cell, file=sys.stderr)
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "threads": torch.get_num_threads(), "cells": cells}))


if __name__ == "__main__":
    main()
