"""What the benchmark scripts share: timing loops, spreads, a target forward at 1,200 tokens of context, paired rounds,
and the subcommand plumbing of their command lines.

Knows: how to time a call (after a warm-up, or alone), how to summarise repeats (median with [min, max]), how to
time one forward over q new tokens per row after a context (1,200 tokens unless told; ``measure_runs``), the native attention
over a model's layers' caches, and how to summarise two variants timed alternately round by round (one ratio a
round). Does not know: what any script measures or prints; it prints nothing but the paired cells (to stderr).
Not a script: the topic scripts beside it import it (their folder is on ``sys.path`` when they run).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from speculab.models.llama import causal_batch, prefill
from speculab.testbed import cpu_name, testbed

CONTEXT = 1200
PAIRED_CELLS = {1: [1, 4, 8, 16], 16: [1, 4]}  # batch size -> tokens per row, for the paired forwards


def run_record() -> dict:
    """What heads every script's result: the command that produced it (as run from the repository root), the CPU and
    the machine's record."""
    return {"command": " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]), "cpu": cpu_name(), "testbed": testbed()}


def clocked(fn: Callable):
    """(fn's result, seconds it took)."""
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def timed(fn: Callable, repeats: int, warmup: int = 1) -> list[float]:
    """Seconds of each of ``repeats`` calls, after ``warmup`` untimed calls (first calls pack weights, size buffers)."""
    for _ in range(warmup):
        fn()
    return [clocked(fn)[1] for _ in range(repeats)]


def median_ms(fn: Callable, repeats: int, warmup: int = 1) -> float:
    return statistics.median(timed(fn, repeats, warmup)) * 1e3


def per_call_us(fn: Callable, items) -> float:
    """Mean µs of ``fn(item)`` over ``items`` (many calls in one timing, so a call's own clock noise averages out)."""
    items = list(items)
    began = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - began) / len(items) * 1e6


def spread(values, digits: int | None = None) -> dict:
    """The median with min and max, rounded to ``digits`` (None: as they are)."""
    values = list(values)
    keep = (lambda v: v) if digits is None else (lambda v: round(v, digits))
    return {"median": keep(statistics.median(values)), "min": keep(min(values)), "max": keep(max(values))}


def read_bandwidth_gbs(num_bytes: int, repeats: int) -> list[float]:
    """GB/s of a streaming sum over ``num_bytes`` of fp32 (several passes a repeat, so small buffers time well)."""
    data = torch.ones(num_bytes // 4)
    passes = max(1, (1 << 30) // num_bytes)

    def run():
        for _ in range(passes):
            data.sum()

    return [passes * num_bytes / t / 1e9 for t in timed(run, repeats)]


def measure_runs(model, batch_size: int, qs: list[int], repeats: int, context: int = CONTEXT) -> dict[int, list[float]]:
    """Every repeat's ms of a forward over q tokens per row after ``context`` tokens, for each q (interleaved across q,
    after one warm-up round)."""
    cache = filled_cache(model, batch_size, context, context + max(qs) + 8)
    tokens_of = torch.randint(0, model.config.vocab_size, (max(qs),)).tolist()
    rows, start = torch.arange(batch_size), torch.full((batch_size,), context)
    times: dict[int, list[float]] = {q: [] for q in qs}
    for _ in range(repeats + 1):  # the first round warms up
        for q in qs:
            batch = causal_batch(rows, start, q)
            tokens = torch.tensor([tokens_of[:q]] * batch_size)
            times[q].append(clocked(lambda: model(tokens, batch, cache))[1])
    return {q: [x * 1e3 for x in t[1:]] for q, t in times.items()}


def filled_cache(model, batch_size: int, context: int, max_len: int):
    """A cache whose every slot holds ``context`` positions: one prefill of random tokens, copied to the other slots
    (what a forward costs does not depend on the values, and a prefill per slot would take minutes at long contexts)."""
    cache = model.new_cache(batch_size, max_len)
    prefill(model, cache, 0, torch.randint(0, model.config.vocab_size, (context,)).tolist())
    cache.kv[:, 1:] = cache.kv[:, :1]
    for slot in range(1, batch_size):
        cache.commit(slot, context)
    return cache


def measure(model, batch_size: int, qs: list[int], repeats: int) -> dict[int, float]:
    """Median ms of a forward over q tokens per row, for each q."""
    return {q: statistics.median(t) for q, t in measure_runs(model, batch_size, qs, repeats).items()}


def layers_attention(kernels, caches, query, mask, kv_heads: int) -> None:
    """The native attention once per layer, each layer's cache [batch, 2 * kv_heads, positions, head_dim] (K then V)."""
    for layer in caches:
        kernels.cached_attention(query, layer[:, :kv_heads], layer[:, kv_heads:], mask)


def attention_ms(model, batch: int, q: int, repeats: int, context: int = CONTEXT) -> float:
    """Median ms of the native attention alone over the model's layers' caches (``context`` tokens), q rows each."""
    kernels, c = model.native_layers.kernels, model.config
    cache = torch.randn(c.num_layers, batch, 2 * c.num_kv_heads, context + q, c.head_dim)
    group = c.num_heads // c.num_kv_heads
    query = torch.randn(batch, c.num_kv_heads, group * q, c.head_dim)
    mask = torch.zeros(batch, 1, group * q, context + q)
    return median_ms(lambda: layers_attention(kernels, cache, query, mask, c.num_kv_heads), repeats)


def paired_forwards(variants: dict[str, Callable], rounds: int, repeats: int, cells=PAIRED_CELLS) -> dict:
    """``runs[(variant, batch, q)]``: one median ms a round; ``variants[name]()`` readies and returns that variant's
    model. The variants take turns (ABBA) so that the guest's drift of speed falls on all alike."""
    # imported here, not above: ``runs.py commits`` children import this module with an older speculab, without turns.py
    from speculab.bench.turns import abba

    runs = {(name, b, q): [] for name in variants for b, qs in cells.items() for q in qs}
    for r, name in abba(list(variants), rounds):
        model = variants[name]()
        for b, qs in cells.items():
            for q, times in measure_runs(model, b, qs, repeats).items():
                runs[(name, b, q)].append(statistics.median(times))
        print(f"round {r + 1}/{rounds}: {name} done", file=sys.stderr)
    return runs


def paired_cells(runs: dict, cells: dict[int, list[int]], over: str, under: str) -> list[dict]:
    """Per (batch, q): both variants' median ms and the median of the per-round ratios over/under with [min, max]
    (each cell also printed to stderr). ``runs[(variant, batch, q)]`` holds one median ms per round, in round order
    for both variants, so that round i of one pairs with round i of the other."""
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


def command_line(doc: str) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """A script's parser (its docstring as the description) and the subparsers its subcommands join."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def subcommand(subparsers, name: str, run: Callable) -> argparse.ArgumentParser:
    """The subcommand ``name`` that calls ``run(args)``; its help is ``run``'s docstring."""
    doc = inspect.cleandoc(run.__doc__ or "")
    parser = subparsers.add_parser(
        name, help=doc.split("\n\n")[0].replace("\n", " "), description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.set_defaults(run=run)
    return parser


def run_subcommand(parser: argparse.ArgumentParser) -> None:
    """Parse the command line and run the subcommand it names."""
    args = parser.parse_args()
    args.run(args)
