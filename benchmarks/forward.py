"""Where a target forward stands on this machine: the machine's floor, a forward against it, and what a verify costs.

Subcommands (``--help`` on each says more):
- ``machine-floor``: streaming bandwidth, the GEMM peak, and from them a forward's memory floor and crossover q;
- ``floor``: a forward's T(q)/T(1), its share of that floor and where its time goes, for every kernel variant here;
- ``verify-cost``: a verify of q tokens per row at each batch size, and the most speculation could gain there;
- ``cost``: one forward over 1 / 4 / 16 / 26 tokens at batch 1, in each dtype, relative to q = 1.
Knows: the embedded model, 1,200 tokens of context a row unless ``--contexts`` names others, random tokens (their values do not change the cost).
Does not know: drafting (``drafters.py``), acceptance, a kernel alone (``kernels_alone.py``) or one kernel against another
in whole forwards (``forward_kernels.py``).
Usage: python benchmarks/forward.py COMMAND [options]; e.g. ``forward.py floor --repeats 5``. Progress goes to stderr;
the last stdout line is one JSON document.
"""

import json
import statistics
import sys

import torch
from common import (
    CONTEXT,
    attention_ms,
    command_line,
    measure,
    measure_runs,
    median_ms,
    read_bandwidth_gbs,
    run_subcommand,
    spread,
    subcommand,
    timed,
)

from speculab.cpu import cpu_flags, cpu_has_native_bf16, reported_cpu_flags
from speculab.models.config import ModelConfig
from speculab.models.embedded import resolve_model_path
from speculab.models.linear import linear_kind
from speculab.models.memory import kv_bytes_per_token
from speculab.runtime import default_dtype, load

BATCHES = (1, 16)
CONTEXTS_HELP = "tokens of context a row, each measured in turn (default: 1200)"


def forward_shape(config: ModelConfig, context: int, kv_bytes: int, weight_bytes: int) -> dict:
    """Bytes a forward reads and multiply-adds a token costs, for one sequence at ``context`` tokens."""
    h, inter, d = config.hidden_size, config.intermediate_size, config.head_dim
    per_layer = h * (config.num_heads + 2 * config.num_kv_heads) * d + config.num_heads * d * h + 3 * h * inter
    linear_fma = config.num_layers * per_layer + config.vocab_size * h  # the lm_head scores every position
    attention_fma = config.num_layers * config.num_heads * context * d * 2  # q·k and p·v
    return {
        "weight_bytes": (config.num_layers * per_layer + config.vocab_size * h) * weight_bytes,
        "kv_bytes_per_sequence": kv_bytes_per_token(config, kv_bytes) * context,
        "fma_per_token": linear_fma + attention_fma,
    }


def gemm_gfma(dtype: torch.dtype, repeats: int, size: int = 2048) -> list[float]:
    """G multiply-adds per second of a size³ matmul in ``dtype`` on all threads."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    return [size**3 / t / 1e9 for t in timed(lambda: torch.mm(a, b), repeats)]


def floors(shape: dict, bandwidth: dict[str, float], gfma: float) -> list[dict]:
    """The memory floor, and the crossover q, at each batch size."""
    rows = []
    for b in BATCHES:
        read = shape["weight_bytes"] + b * shape["kv_bytes_per_sequence"]
        # a working set that fits the cache streams at the small buffer's rate; a bigger one at memory's
        gbs = bandwidth["working_set"] if b == 1 else bandwidth["memory"]
        floor_ms = read / gbs / 1e6
        fma_ms_per_row = shape["fma_per_token"] / gfma / 1e6
        rows.append(
            {
                "batch_size": b,
                "bytes_read_mb": round(read / 1e6, 1),
                "bandwidth_gbs": round(gbs, 2),
                "memory_floor_ms": round(floor_ms, 2),
                "arithmetic_ms_per_token_row": round(fma_ms_per_row, 3),
                "crossover_q": round(floor_ms / (b * fma_ms_per_row), 2),
                "floor_ms_at_q": {q: round(max(floor_ms, b * q * fma_ms_per_row), 2) for q in (1, 4, 8, 16)},
            }
        )
    return rows


def machine_floor(args) -> None:
    """What this machine allows a target forward: streaming bandwidth, arithmetic peak, and from them the floor.

    Measures, on all threads (medians of ``--repeats`` with [min, max]):
    - streaming read bandwidth over 1 GiB (memory) and over a buffer the size of one batch-1 forward's working set
      (the weights plus one sequence's K/V; it may sit in a large L3, which is what a forward then sees);
    - the fp32 FMA rate a well-kept GEMM reaches (a 2,048³ ``torch.mm``: oneDNN/MKL, all cores): the arithmetic
      peak a kernel can count on, in G FMA/s; and the bf16 rate where the CPU has AVX512-BF16/AMX.
    From them, for the embedded model at ``--context`` tokens and batch sizes 1 and 16, in the dtype speculab picks
    here (fp32 activations over bf16 weights with the native kernels, or bf16 with oneDNN):
    - the memory floor: weight bytes once plus every row's K/V, over the bandwidth of that working set;
    - the arithmetic of q tokens per row (linears, lm_head, attention) at the FMA peak;
    - the crossover q: the most tokens per row whose arithmetic still hides under the memory floor.
    ``floor`` states a forward's time as a share of this floor.
    """
    dtype = args.dtype or default_dtype("cpu")
    config = ModelConfig.from_file(resolve_model_path(None) / "config.json")
    # weights are bf16 numbers either way (fp32 widens them in the kernel); K/V are stored in the forward's dtype
    shape = forward_shape(config, args.context, 4 if dtype == "float32" else 2, 2)
    working_set = shape["weight_bytes"] + shape["kv_bytes_per_sequence"]
    bw_memory = read_bandwidth_gbs(1 << 30, args.repeats)
    bw_working = read_bandwidth_gbs(working_set, args.repeats)
    print(
        f"bandwidth: 1 GiB {statistics.median(bw_memory):.1f} GB/s, {working_set / 1e6:.0f} MB {statistics.median(bw_working):.1f} GB/s",
        file=sys.stderr,
    )
    fp32 = gemm_gfma(torch.float32, args.repeats)
    bf16 = gemm_gfma(torch.bfloat16, args.repeats) if cpu_has_native_bf16() else None
    gfma = statistics.median(fp32 if dtype == "float32" else bf16 or fp32)
    bandwidth = {"memory": statistics.median(bw_memory), "working_set": statistics.median(bw_working)}
    result = {
        "cpu_flags": reported_cpu_flags(),
        "threads": torch.get_num_threads(),
        "dtype": dtype,
        "context": args.context,
        "read_bandwidth_gbs": {"memory_1gib": spread(bw_memory, 2), f"working_set_{working_set // 10**6}mb": spread(bw_working, 2)},
        "gemm_gfma_per_s": {"float32": spread(fp32, 1)} | ({"bfloat16": spread(bf16, 1)} if bf16 else {}),
        "forward": shape,
        "floors": floors(shape, bandwidth, gfma),
    }
    print(json.dumps(result))


def parts_ms(model, batch: int, q: int, repeats: int, context: int) -> dict[str, float]:
    """Median ms of the model's linears alone, and of its attention alone, on the rows of one (batch, q) step."""
    kernels, c = model.native_layers.kernels, model.config
    rows = batch * q
    x, wide = torch.randn(rows, c.hidden_size), torch.randn(rows, c.intermediate_size)
    width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim

    def linears():
        for p in model.native_layers.params:
            kernels.linear(x, p[1], width, None)
            kernels.linear(x, p[3], c.hidden_size, None, x)
            kernels.linear(x, p[5], 2 * c.intermediate_size, None)
            kernels.linear(wide, p[6], c.hidden_size, None, x)
        model.lm_head(x)

    return {"linears": median_ms(linears, repeats), "attention": attention_ms(model, batch, q, repeats, context)}


def variant_models() -> dict[str, object]:
    """The models to set side by side; "native" packs its weights for the FMA kernels (the AVX512 and AVX2 variants)."""
    models = {"native": load(None, "float32").model}
    kernels = models["native"].native_layers.kernels if models["native"].native_layers is not None else None
    if kernels is not None and kernels.amx_in_use():
        models["native-amx"] = models["native"]
        kernels.use_amx(False)
        models["native"] = load(None, "float32").model
        kernels.use_amx(True)
    if cpu_has_native_bf16():
        models["onednn-bf16"] = load(None, "bfloat16").model
    return models


def run_variant(name: str, model, args, floors: dict[int, float], context: int) -> list[dict]:
    cells = []
    for b in args.batch_sizes:
        runs = measure_runs(model, b, args.qs, args.repeats, context)
        one = statistics.median(runs[1])
        for q in args.qs:
            ms = statistics.median(runs[q])
            cell = {
                "variant": name,
                "context": context,
                "batch_size": b,
                "q": q,
                "ms": round(ms, 2),
                "min": round(min(runs[q]), 2),
                "max": round(max(runs[q]), 2),
            }
            cell |= {"relative": round(ms / one, 3), "share_of_floor": round(floors[b] / ms, 3)}
            if model.native_layers is not None:
                parts = parts_ms(model, b, q, args.repeats, context)
                cell |= {f"{k}_ms": round(v, 2) for k, v in parts.items()} | {"rest_ms": round(ms - sum(parts.values()), 2)}
            cells.append(cell)
            print(cell, file=sys.stderr)
    return cells


def floor(args) -> None:
    """A target forward against this machine's floor: T(q)/T(1), the share of the floor, and where the time goes.

    In one run, interleaved, medians of ``--repeats`` with [min, max], after each of ``--contexts`` tokens of context
    a row (1,200 unless told; the floor's K/V bytes are that context's):
    - ``native-amx``: speculab's fp32 path with the AMX linear kernel (``bf16_linear_amx.cpp``; the default where the
      CPU has AMX) and the AVX512 attention, only where the CPU has AMX;
    - ``native-avx512``: speculab's fp32 path on a bf16 checkpoint (the default where the native kernels are built),
      with the AVX512 kernels (``bf16_linear_avx512.cpp``, ``attention_avx512.cpp``) where the CPU has AVX512F;
    - ``native-avx2``: the same path with the AVX2 kernels (what a CPU without AVX512F runs);
    - ``onednn-bf16``: bf16 with oneDNN's packed matmuls and the Python layer loop (``--dtype bfloat16``;
      the default on AMX/AVX512-BF16 CPUs without the native kernels built), only where the CPU computes bf16 natively.
    For each batch size and q: the forward's ms, T(q)/T(1), and the memory floor of ``machine-floor`` (weights once
    plus every row's K/V over the bandwidth measured in this run) as a share of the forward. For the native variants,
    the breakdown: every linear of the model on the step's rows alone (the weights' share), the attention over the
    model's layers alone (the K/V share), and the rest (norms, RoPE, SiLU, embedding, Python, allocation).
    """
    if args.qs[0] != 1:
        sys.exit("the first q must be 1: the others are stated relative to it")
    models = variant_models()
    native = models["native"]
    variants = [("native-amx", 4, models["native-amx"])] if "native-amx" in models else []
    variants += [("native-avx512", 4, native)] if "avx512f" in cpu_flags() else []
    variants.append(("native-avx2", 4, native))
    if "onednn-bf16" in models:
        variants.append(("onednn-bf16", 2, models["onednn-bf16"]))
    kinds = {}
    cells = []
    bandwidth = statistics.median(read_bandwidth_gbs(1 << 30, 5))  # once, so every variant is set against one floor
    for context in args.contexts:
        for name, kv_bytes, model in variants:
            if model.native_layers is not None:
                model.native_layers.kernels.use_avx512(name != "native-avx2")
            kinds[name] = linear_kind(model)
            shape = forward_shape(model.config, context, kv_bytes, 2)
            floors = {b: (shape["weight_bytes"] + b * shape["kv_bytes_per_sequence"]) / bandwidth / 1e6 for b in args.batch_sizes}
            print(f"{name} at {context} tokens: {kinds[name]}, {bandwidth:.1f} GB/s, floors {floors}", file=sys.stderr)
            cells += [
                c | {"bandwidth_gbs": round(bandwidth, 2), "floor_ms": round(floors[c["batch_size"]], 2)}
                for c in run_variant(name, model, args, floors, context)
            ]
    if native.native_layers is not None:
        native.native_layers.kernels.use_avx512(True)
    record = {"cpu_flags": reported_cpu_flags(), "threads": torch.get_num_threads(), "contexts": args.contexts}
    print(json.dumps(record | {"linear_kernels": kinds, "cells": cells}))


def verify_cost(args) -> None:
    """What a verify step costs at each batch size: one target forward over q tokens per request.

    Every request has ``--contexts`` tokens of context (1,200 unless told), each in turn. For batch size B, a verify of q tokens per request costs forward(B, q);
    with a perfect, free drafter a step then emits q tokens per request, so q · forward(B, 1) / forward(B, q) is the
    most speculation can gain at that batch size on this machine (the ceiling). Medians of interleaved repeats with
    [min, max].
    """
    model = load(None, args.dtype).model
    results = []
    for context in args.contexts:
        for b in args.batch_sizes:
            runs = measure_runs(model, b, args.qs, args.repeats, context)
            ms = {q: statistics.median(t) for q, t in runs.items()}
            for q in args.qs:
                row = {
                    "context": context,
                    "batch_size": b,
                    "q": q,
                    "ms": round(ms[q], 2),
                    "min": round(min(runs[q]), 2),
                    "max": round(max(runs[q]), 2),
                    "relative": round(ms[q] / ms[1], 3),
                    "ceiling_speedup": round(q * ms[1] / ms[q], 3),
                }
                results.append(row)
                print(row, file=sys.stderr)
    record = {"dtype": args.dtype, "cpu_flags": reported_cpu_flags(), "linear_kernels": linear_kind(model), "contexts": args.contexts}
    print(json.dumps(record | {"threads": torch.get_num_threads(), "results": results}))


COST_QS = (1, 4, 16, 26)


def cost(args) -> None:
    """Cost of one target forward over q new tokens after a 1,200-token context, relative to q = 1, in each dtype.

    This is what bounds speculation: a verify step over q draft nodes costs forward(q), and pays only if
    τ · forward(1) > forward(q) + drafting. Medians of 12 per q, interleaved, after a warm-up round (batch 1).
    """
    results = {}
    for dtype in args.dtypes or ["float32", "bfloat16"]:
        ms = measure(load(None, dtype).model, 1, list(COST_QS), repeats=12)
        results[dtype] = {"ms": ms, "relative": {q: ms[q] / ms[1] for q in COST_QS}}
        print(dtype, {q: f"{ms[q]:.1f} ms ({ms[q] / ms[1]:.2f}x)" for q in COST_QS}, file=sys.stderr)
    print(json.dumps(results))


def main() -> None:
    parser, sub = command_line(__doc__)
    p = subcommand(sub, "machine-floor", machine_floor)
    p.add_argument("--dtype", default=None, help="the forward's dtype (default: speculab's pick on this CPU)")
    p.add_argument("--context", type=int, default=CONTEXT)
    p.add_argument("--repeats", type=int, default=5)
    p = subcommand(sub, "floor", floor)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    p.add_argument("--qs", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--contexts", type=int, nargs="+", default=[CONTEXT], help=CONTEXTS_HELP)
    p = subcommand(sub, "verify-cost", verify_cost)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--qs", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    p.add_argument("--contexts", type=int, nargs="+", default=[CONTEXT], help=CONTEXTS_HELP)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--dtype", default="float32")
    p = subcommand(sub, "cost", cost)
    p.add_argument("dtypes", nargs="*", help="default: float32 bfloat16")
    run_subcommand(parser)


if __name__ == "__main__":
    main()
