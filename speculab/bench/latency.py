"""Latency figures of a cell from its requests' timestamps: TTFT, queueing, TPOT, ITL, tok/s per request.

Knows: what each figure counts from (TTFT from the request's admission into a free slot, as
``vllm bench serve --max-concurrency`` counts it; queueing apart) and percentiles by linear interpolation.
Does not know: how the requests ran (``runner.py``, ``endpoint.py``).
"""

from __future__ import annotations

import statistics

from speculab.request import Request


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def request_timings(requests: list[Request]) -> dict:
    """TTFT, queue, TPOT and ITL at p50 and p99, and the mean tok/s per request, from the requests' token times."""
    # TTFT counts from when a request entered a free slot, as `vllm bench serve --max-concurrency` counts it;
    # the wait for that slot is its own figure (queue), not part of TTFT
    ttft = [r.token_times[0] - r.admitted_time for r in requests if r.token_times and r.admitted_time is not None]
    queue = [r.admitted_time - r.arrival_time for r in requests if r.admitted_time is not None]
    tpot, itl, per_request = [], [], []
    for r in requests:
        times = r.token_times
        if len(times) > 1:
            span = times[-1] - times[0]
            tpot.append(span / (len(times) - 1))
            per_request.append((len(times) - 1) / span if span > 0 else float("nan"))
            emissions = sorted(set(times))  # tokens accepted together arrive together: one chunk
            itl += [b - a for a, b in zip(emissions, emissions[1:])]
    out = {"tok_s_per_request": statistics.fmean(per_request) if per_request else None}
    for name, values in (("ttft", ttft), ("queue", queue), ("tpot", tpot), ("itl", itl)):
        out[f"{name}_p50_s"] = percentile(values, 0.5)
        out[f"{name}_p99_s"] = percentile(values, 0.99)
    return out
