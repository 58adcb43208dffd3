"""The summary of a paired benchmark: two variants timed alternately round by round, one ratio per round.

Knows: ``runs[(variant, batch, q)]`` -> one median ms per round, in round order for both variants, so that round i
of one pairs with round i of the other. Does not know: what ran.
"""

import statistics
import sys


def paired_cells(runs: dict, cells: dict[int, list[int]], over: str, under: str) -> list[dict]:
    """Per (batch, q): both variants' median ms and the median of the per-round ratios over/under with [min, max]
    (each cell also printed to stderr)."""
    out = []
    for b, qs in cells.items():
        for q in qs:
            ratios = [x / y for x, y in zip(runs[(over, b, q)], runs[(under, b, q)], strict=True)]
            cell = {"batch_size": b, "q": q} | {f"{n}_ms": round(statistics.median(runs[(n, b, q)]), 2) for n in (under, over)}
            cell |= {f"{over}_over_{under}": round(statistics.median(ratios), 3), "spread": [round(min(ratios), 3), round(max(ratios), 3)]}
            out.append(cell)
            print(cell, file=sys.stderr)
    return out


def relative_at_batch_1(runs: dict, qs: list[int], variants) -> dict:
    """T(q)/T(1) at batch 1 for each variant, from the medians of its rounds."""
    return {n: {q: round(statistics.median(runs[(n, 1, q)]) / statistics.median(runs[(n, 1, 1)]), 3) for q in qs} for n in variants}
