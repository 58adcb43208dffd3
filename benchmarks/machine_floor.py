"""What this machine allows a target forward: streaming bandwidth, arithmetic peak, and from them the floor.

Measures, on all threads (medians of ``--repeats`` with [min, max]):
- streaming read bandwidth over 1 GiB (memory) and over a buffer the size of one batch-1 forward's working set
  (the weights plus one sequence's K/V; it may sit in a large L3, which is what a forward then sees);
- the fp32 FMA rate a well-kept GEMM reaches (a 2,048³ ``torch.mm``: oneDNN/MKL, all cores): the arithmetic
  peak a kernel can count on, in G FMA/s; and the bf16 rate where the CPU has AVX512-BF16/AMX.
From them, for the embedded model at 1,200 tokens of context and batch sizes 1 and 16, in the dtype speculab
picks here (fp32 activations over bf16 weights with the native kernels, or bf16 with oneDNN):
- the memory floor: weight bytes once plus every row's K/V, over the bandwidth of that working set;
- the arithmetic of q tokens per row (linears, lm_head, attention) at the FMA peak;
- the crossover q: the most tokens per row whose arithmetic still hides under the memory floor.
Usage: python benchmarks/machine_floor.py [--dtype float32] [--context 1200]. The last stdout line is one JSON
document; ``forward_floor.py`` states a forward's time as a share of this floor.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from speculab.cpu import cpu_has_native_bf16, reported_cpu_flags
from speculab.models.config import ModelConfig
from speculab.models.embedded import resolve_model_path
from speculab.models.memory import kv_bytes_per_token
from speculab.runtime import default_dtype

CONTEXT = 1200
BATCHES = (1, 16)


def timed(fn, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return times


def spread(values: list[float], digits: int = 2) -> dict:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits), "max": round(max(values), digits)}


def read_bandwidth_gbs(num_bytes: int, repeats: int) -> list[float]:
    """GB/s of a streaming sum over ``num_bytes`` of fp32 (several passes a repeat, so small buffers time well)."""
    data = torch.ones(num_bytes // 4)
    passes = max(1, (1 << 30) // num_bytes)

    def run():
        for _ in range(passes):
            data.sum()

    return [passes * num_bytes / t / 1e9 for t in timed(run, repeats)]


def gemm_gfma(dtype: torch.dtype, repeats: int, size: int = 2048) -> list[float]:
    """G multiply-adds per second of a size³ matmul in ``dtype`` on all threads."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    return [size**3 / t / 1e9 for t in timed(lambda: torch.mm(a, b), repeats)]


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default=None, help="the forward's dtype (default: speculab's pick on this CPU)")
    parser.add_argument("--context", type=int, default=CONTEXT)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
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
        "read_bandwidth_gbs": {"memory_1gib": spread(bw_memory), f"working_set_{working_set // 10**6}mb": spread(bw_working)},
        "gemm_gfma_per_s": {"float32": spread(fp32, 1)} | ({"bfloat16": spread(bf16, 1)} if bf16 else {}),
        "forward": shape,
        "floors": floors(shape, bandwidth, gfma),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
