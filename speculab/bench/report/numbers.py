"""How numbers are written in the report: one formatter per kind of figure, a dash for a missing one.

Does not know: how a figure was measured (``speedups.py``, ``results.py``)."""

from __future__ import annotations

import math

from speculab.bench.report.results import Context, Results

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


def speedup_text(results: Results, label: str, batch: int) -> str:
    """``2.45×`` and, where the speedup has a spread, ``2.45× [2.31–2.52]`` (``speedups.py``)."""
    found = results.measured_speedup(label, batch)
    if found is None:
        return DASH
    if found.low is None or found.high is None:
        return times(found.value)
    return f"{times(found.value)} [{found.low:.2f}–{found.high:.2f}]"


def tok_x(results: Results, label: str, batch: int) -> str:
    """A cell's tok/s and, for a speculative label with a baseline, its speedup in brackets."""
    tok = results.tok_s(label, batch)
    if tok is None:
        return DASH
    if results.is_baseline(label) or results.measured_speedup(label, batch) is None:
        return num(tok)
    return f"{num(tok)} ({speedup_text(results, label, batch)})"


def nearest(batches: list[int], wanted: int) -> int | None:
    return min(batches, key=lambda b: (abs(math.log2(b) - math.log2(wanted)), b)) if batches else None


def tokens_k(n: int) -> str:
    """A token count at a glance: 4096 -> '4.1k', 812 -> '812'."""
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def context_name(results: Results, context: Context) -> str:
    """A context as every table, plot and sentence names it: its median prompt length in target tokens
    (``Results.context_tokens``), else the length asked for; where two contexts would read alike, the asked one follows
    in brackets."""

    def plain(c: Context) -> str:
        measured = results.context_tokens(c)
        return tokens_k(measured) if measured is not None else tokens_k(c) if c is not None else "as written"

    name = plain(context)
    if any(plain(other) == name for other in results.contexts if other != context):
        return f"{name} ({'as written' if context is None else count(context)})"
    return name
