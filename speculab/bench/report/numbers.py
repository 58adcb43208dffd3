"""How numbers are written in the report: one formatter per kind of figure, a dash for a missing one."""

from __future__ import annotations

import math

from speculab.bench.report.results import Results

DASH = "—"


def num(x: float | None, digits: int = 1) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def times(speedup: float | None) -> str:
    return DASH if speedup is None else f"{speedup:.2f}×"


def pct(x: float | None) -> str:
    return DASH if x is None else f"{100 * x:.1f}%"


def ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{1000 * seconds:.1f}"


def size(n: float | None) -> str:
    """IEC units: 327680 -> '320.0 KiB'."""
    if n is None:
        return DASH
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}" if unit != "KiB" else f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def count(n: int | None) -> str:
    return DASH if n is None else f"{n:,}"


def tok_x(results: Results, label: str, batch: int) -> str:
    tok = results.tok_s(label, batch)
    if tok is None:
        return DASH
    speedup = results.speedup(label, batch)
    if results.is_baseline(label) or speedup is None:
        return num(tok)
    spread = results.speedup_range(label, batch)
    return f"{num(tok)} ({times(speedup)})" if spread is None else f"{num(tok)} ({times(speedup)} [{spread[0]:.2f}–{spread[1]:.2f}])"


def nearest(batches: list[int], wanted: int) -> int | None:
    return min(batches, key=lambda b: (abs(math.log2(b) - math.log2(wanted)), b)) if batches else None
