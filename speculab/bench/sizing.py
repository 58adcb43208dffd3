"""Sizing a benchmark run to a time limit: how many prompts each (batch size, context) cell gets.

Knows: a short calibration (plain decoding of a few tokens at the smallest and the largest batch size,
on the machine at hand, with the first context's prompts), the tok/s in between (geometric in log2 of the batch
size: measured rates grow about that way), at another context (a decode step reads the weights and every sequence's
KV, so its time grows with those bytes: ``rate_at_context``), and the sizing rule: every (batch size, context) gets
an equal share of the limit across the methods measured at it, and as many prompts as fit that share, a whole number
of batches, at least one batch and at most the workload's prompts.

Sizings are remembered per machine (``remembered``): a rerun on the same machine with the same settings runs the same
prompts whatever its own calibration reads, so two runs' speedups compare (the acceptance of a prompt set moves every
method's speedup alike).

Does not know: what a cell measures (``runner.py``), or how the methods draft: a speculative method is
taken to run at about plain decoding's rate, which is what sizing to a limit needs, not what it reports.
"""

from __future__ import annotations

import hashlib
import json
import math
import time

from speculab.engine import Engine
from speculab.files import cache_dir
from speculab.free_memory import MemoryShortfall
from speculab.policy.store import machine_id
from speculab.sampling import SamplingParams

CALIBRATION_TOKENS = 16


def rate_at(rates: dict[int, float], batch: int) -> float:
    """tok/s at ``batch`` from the rates measured at a few batch sizes: geometric in log2(batch) between
    the nearest measured sizes, and the nearest one's rate outside them."""
    sizes = sorted(rates)
    if batch <= sizes[0]:
        return rates[sizes[0]]
    if batch >= sizes[-1]:
        return rates[sizes[-1]]
    low = max(b for b in sizes if b <= batch)
    high = min(b for b in sizes if b >= batch)
    if low == high:
        return rates[low]
    share = (math.log2(batch) - math.log2(low)) / (math.log2(high) - math.log2(low))
    return rates[low] ** (1 - share) * rates[high] ** share


def rate_at_context(rate: float, batch: int, model, measured_tokens: float, tokens: float) -> float:
    """``rate`` (tok/s at ``batch`` with prompts of ``measured_tokens``) with prompts of ``tokens``: scaled by the bytes
    a decode step reads, the weights once and each sequence's KV."""
    weights = sum(p.nbytes for p in model.parameters())
    kv_token = model.cache_bytes(1, 1)
    return rate * (weights + batch * measured_tokens * kv_token) / (weights + batch * tokens * kv_token)


def prompts_per_batch(
    rates: dict[int, float],
    batch_sizes: tuple[int, ...],
    cells_per_batch: int,
    max_tokens: int,
    repeats: int,
    limit_s: float,
    num_prompts: int,
    least: int = 1,
) -> dict[int, int]:
    """Batch size -> prompts its cells run: each batch size gets limit / len(batch_sizes) seconds for its
    ``cells_per_batch`` cells (methods), each running prompts × max_tokens × repeats tokens; at least ``least`` prompts
    (a prompt of each language: one or two are one language's acceptance), in whole batches."""
    share = limit_s / len(batch_sizes) / max(1, cells_per_batch)
    sized = {}
    for b in batch_sizes:
        fits = share * rate_at(rates, b) / (max_tokens * repeats)
        whole_batches = max(1, int(fits // b), math.ceil(least / b))
        sized[b] = min(num_prompts, whole_batches * b) if num_prompts >= b else num_prompts
    return sized


def calibrate(model, prompts: list[list[int]], batch_sizes: tuple[int, ...], stop_ids, cache=None) -> dict[int, float]:
    """Plain decoding's tok/s at the smallest and the largest batch size (a few tokens each, prompts from the
    workload, after the caller's warm-up), on the machine at hand."""
    rates = {}
    for b in sorted({min(batch_sizes), max(batch_sizes)}):
        chosen = (prompts * b)[:b]
        params = SamplingParams(max_tokens=CALIBRATION_TOKENS, ignore_eos=True)
        try:
            engine = Engine(model, b, max(map(len, chosen)) + CALIBRATION_TOKENS + 2, stop_ids, None, cache)
        except MemoryShortfall:  # the largest batch's cells will say so; its rate is the smaller one's (rate_at)
            continue
        started = time.perf_counter()
        requests = engine.generate(chosen, params)
        rates[b] = sum(len(r.output_ids) for r in requests) / (time.perf_counter() - started)
    return rates


def per_cell(recorded: dict) -> dict[str, dict[int, int]]:
    """``prompts_per_cell`` as JSON gives it back (batch sizes as strings) with batch sizes as ints."""
    return {context: {int(b): n for b, n in sizes.items()} for context, sizes in recorded.items()}


def remembered(settings: dict, sized: dict[str, dict[int, int]]) -> tuple[dict[str, dict[int, int]], bool]:
    """The sizing an earlier run on this machine with these ``settings`` (JSON-able) chose, else ``sized``, kept for
    the next run: (prompts per context and batch size, whether it was an earlier run's)."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = cache_dir() / "bench-sizing" / machine_id() / f"{key}.json"
    try:
        return per_cell(json.loads(path.read_text())["prompts_per_cell"]), True
    except (OSError, ValueError, KeyError, AttributeError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"settings": settings, "prompts_per_cell": sized}, default=str, indent=1) + "\n")
        return sized, False
