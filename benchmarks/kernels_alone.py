"""The kernels alone, outside a forward: one linear layer, oneDNN's packed layouts, AMX against FMA on single
matmuls, the native attention over fp32 and bf16 caches, and the greedy argmax.

Subcommands (``--help`` on each says more):
- ``linear``: the native bf16-weight linear against oneDNN-packed fp32 and ``F.linear``, with its accuracy;
- ``linear-pack``: oneDNN's prepacked fp32 linear by batch hint (packed layout) and by rows per call;
- ``amx-probe``: speculab's FMA and AMX linear kernels against oneDNN's prepacked bf16 matmul;
- ``attention``: the native attention over an fp32 cache against a bf16 one, paired round by round;
- ``flash``: the native attention against ATen's flash attention, from a decode step's rows to a prefill chunk's;
- ``argmax``: torch's CPU argmax against ``sampling.greedy_tokens`` (numpy's).
Knows: the embedded model's shapes (hidden 576, 9 query / 3 KV heads of 64, vocabulary 49,152), random weights and
inputs (values do not change the cost). Does not know: a whole forward (``forward.py``, ``forward_kernels.py``).
Usage: python benchmarks/kernels_alone.py COMMAND [options]. The last stdout line is one JSON document.
"""

import json
import statistics
import sys

import torch
import torch.nn.functional as F
from common import PAIRED_CELLS, clocked, command_line, layers_attention, median_ms, paired_cells, per_call_us, run_subcommand, subcommand

from speculab import native
from speculab.bench.turns import abba
from speculab.cpu import reported_cpu_flags
from speculab.models.linear import PackedLinear
from speculab.runtime import load
from speculab.sampling import greedy_tokens

LINEAR_SHAPES = {"qkv": (960, 576), "gate_up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}
PACK_SHAPES = {"lm_head": (49152, 576), "gate_up": (3072, 576), "down": (576, 1536), "qkv": (960, 576)}
AMX_SHAPES = ((3072, 576), (576, 1536))  # gate|up and down of the embedded model
AMX_WEIGHT_BYTES = 290e6  # copies of each shape, so that every call reads its weight from memory
LAYERS, CONTEXT, KV_HEADS, GROUP, HEAD_DIM = 30, 1200, 3, 3, 64
VOCAB, ARGMAX_CALLS = 49152, 500


def native_or_exit(command: str):
    kernels = native.kernels()
    if kernels is None:
        sys.exit(f"kernels_alone.py {command}: native kernels unavailable: {native.disabled_reason() or 'run make setup'}")
    return kernels


def linear_cell(kernels, name: str, n: int, k: int, m: int, weights: dict, repeats: int) -> dict:
    """One shape at ``m`` rows: each way's ms a call, the native kernel's error and whether rows are batch-invariant."""
    copies = len(weights["fp32"])
    x = torch.randn(m, k)
    got = kernels.linear(x, weights["native"][0], n, None)
    alone = torch.cat([kernels.linear(x[i : i + 1], weights["native"][0], n, None) for i in range(m)])
    reference = (x.double() @ weights["fp32"][0].double().T).float()
    cell = {
        "layer": name,
        "out": n,
        "in": k,
        "rows": m,
        "native_ms": median_ms(lambda: [kernels.linear(x, w, n, None) for w in weights["native"]], repeats) / copies,
        "onednn_fp32_ms": median_ms(lambda: [p(x) for p in weights["onednn"]], repeats) / copies,
        "f_linear_fp32_ms": median_ms(lambda: [F.linear(x, w) for w in weights["fp32"]], repeats) / copies,
        "max_abs_error_vs_float64": (got - reference).abs().max().item(),
        "rows_bit_identical_alone": torch.equal(alone, got),
    }
    cell["native_vs_onednn"] = cell["onednn_fp32_ms"] / cell["native_ms"]
    return {key: round(v, 4) if isinstance(v, float) else v for key, v in cell.items()}


def linear(args) -> None:
    """One linear layer, three ways: the native bf16-weight kernel vs oneDNN-packed fp32 vs F.linear (fp32).

    The embedded model's shapes (qkv 960x576, gate|up 3072x576, down 576x1536, lm_head 49152x576) at ``--rows``;
    30 copies of each weight (one for the lm_head) so each call reads its weight from memory, as a forward does.
    Also checks the kernel's accuracy against float64 and that each row's result is bit for bit the same whether it
    is computed alone or with the others. Medians of ``--repeats``.
    """
    kernels = native_or_exit("linear")
    torch.manual_seed(0)
    cells = []
    for name, (n, k) in LINEAR_SHAPES.items():
        bf16 = [torch.randn(n, k).to(torch.bfloat16) for _ in range(1 if name == "lm_head" else 30)]
        weights = {"native": [kernels.pack(w) for w in bf16], "fp32": [w.float() for w in bf16], "onednn": []}
        for w in weights["fp32"]:
            layer = torch.nn.Linear(k, n, bias=False).requires_grad_(False)
            layer.weight.copy_(w)
            weights["onednn"].append(PackedLinear(layer))
        for m in args.rows:
            cells.append(linear_cell(kernels, name, n, k, m, weights, args.repeats))
            print(cells[-1], file=sys.stderr)
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "threads": torch.get_num_threads(), "cells": cells}))


def linear_pack(args) -> None:
    """Cost of oneDNN's prepacked fp32 linear by batch hint (packed layout) and by rows per call.

    Why it exists: ``mkldnn._reorder_linear_weight(w, batch_hint)`` picks the packed layout. With a hint of 1 oneDNN
    chooses a GEMV layout and reorders the weight again on every call with more rows, which made every verify step
    and every batched decode step pay 2-3x for its matmuls. The SmolLM2-135M shapes, hot in cache: it isolates the
    kernel, not memory bandwidth. Medians of 20.
    """
    torch.manual_seed(0)
    results: dict[str, dict[str, dict[int, float]]] = {}
    for name, (out_features, in_features) in PACK_SHAPES.items():
        weight = torch.randn(out_features, in_features)
        results[name] = {}
        for hint in (1, 2, 16):
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, hint)
            row = {}
            for rows in (1, 2, 4, 8, 16, 32):
                x = torch.randn(rows, in_features)
                row[rows] = median_ms(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), 20, warmup=3)
            results[name][f"hint_{hint}"] = row
            print(name, f"hint {hint}:", " ".join(f"M={m}: {v:.2f} ms" for m, v in row.items()), file=sys.stderr)
    print(json.dumps({"threads": torch.get_num_threads(), "ms": results}))


def packed_both(kernels, weights):
    """Each weight packed for the FMA kernels and, where the CPU has AMX, for the AMX kernel."""
    before = kernels.use_amx(False)
    fma = [kernels.pack(w) for w in weights]
    kernels.use_amx(True)
    amx = [kernels.pack(w) for w in weights] if kernels.amx_in_use() else None
    kernels.use_amx(before)
    return fma, amx


def amx_shape_cells(kernels, n: int, k: int, rows_list: list[int]) -> list[dict]:
    weights = [torch.randn(n, k).to(torch.bfloat16) for _ in range(int(AMX_WEIGHT_BYTES / (2 * n * k)))]
    fma, amx = packed_both(kernels, weights)
    cells = []
    for rows in rows_list:
        onednn = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in weights]
        x = torch.randn(rows, k)
        xb = x.to(torch.bfloat16)
        fp32 = lambda p: kernels.linear(x, p, n, None)  # noqa: E731
        bf16 = lambda w: torch.ops.mkldnn._linear_pointwise(xb, w, None, "none", [], "")  # noqa: E731
        ways = {"native_fp32_us": (fp32, fma), "onednn_bf16_us": (bf16, onednn)}
        ways["onednn_bf16_three_us"] = (lambda w: [bf16(w) for _ in range(3)], onednn)
        if amx is not None:
            ways["native_amx_fp32_us"] = (fp32, amx)
        runs = {name: [] for name in ways}
        for _ in range(5):  # interleaved
            for name, (fn, packed) in ways.items():
                runs[name].append(per_call_us(fn, packed))
        cell = {"shape": [n, k], "rows": rows} | {name: round(statistics.median(v), 1) for name, v in runs.items()}
        cells.append(cell)
        print(cell, file=sys.stderr)
    return cells


def amx_probe(args) -> None:
    """Would AMX pay for the linears here? speculab's fp32 kernels (the AVX512 FMA one and, where the CPU has AMX, its
    own AMX one) against oneDNN's prepacked bf16 matmul (AMX where the CPU has it), on two of the model's shapes
    (gate|up 3,072 x 576 and down 576 x 1,536), the weights read from memory.

    Knows: the time per call of ``kernels.linear`` on FMA-packed weights (fp32 activations, bf16 weights, fp32 FMA
    chains) and on AMX-packed ones (``bf16_linear_amx.cpp``: the fp32 product as three bf16 terms on the tiles), of
    oneDNN's ``_linear_pointwise`` on a bf16 weight reordered once for the row count (bf16 activations: another
    rounding, so not a drop-in), and of three oneDNN calls in a row (the arithmetic of an fp32-accurate product split
    into three bf16 terms; each call reads the weight again, partly from cache, so this bounds from above a kernel
    that loads each weight tile once for the three terms).
    Does not know: the whole forward (``forward_kernels.py amx`` sets the two kernels side by side there).
    """
    kernels = load(None, "float32").model.native_layers.kernels
    cells = [cell for n, k in AMX_SHAPES for cell in amx_shape_cells(kernels, n, k, args.rows)]
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "weight_bytes": AMX_WEIGHT_BYTES, "cells": cells}))


def attention(args) -> None:
    """The native attention alone over an fp32 cache and over a bf16 one (the AMX tiles where the CPU has them), paired.

    Knows: 30 layers' worth of distinct caches (1,200 positions each, so every call reads its keys and values from
    memory), the embedded model's heads (9 query, 3 KV, head_dim 64), q new tokens a row: both cache dtypes timed
    alternately round after round; per (batch, q) each dtype's median ms over the 30 layers, and the median of the
    per-round ratios bf16 / fp32 with their [min, max].
    Does not know: the rest of a forward (``forward_kernels.py kv-dtype``).
    """
    kernels = native_or_exit("attention")
    times = {}
    for b, qs in PAIRED_CELLS.items():
        fp32 = [torch.randn(b, 2 * KV_HEADS, CONTEXT, HEAD_DIM) for _ in range(LAYERS)]
        caches = {"bf16": [c.to(torch.bfloat16) for c in fp32], "fp32": fp32}
        for q in qs:
            query, mask = torch.randn(b, KV_HEADS, GROUP * q, HEAD_DIM), torch.zeros(b, 1, GROUP * q, CONTEXT)
            for name in caches:
                layers_attention(kernels, caches[name], query, mask, KV_HEADS)  # warm-up
            for _, name in abba(list(caches), args.rounds):
                _, seconds = clocked(lambda name=name: layers_attention(kernels, caches[name], query, mask, KV_HEADS))
                times.setdefault((name, b, q), []).append(seconds * 1e3)
    cells = paired_cells(times, PAIRED_CELLS, "bf16", "fp32")
    record = {"cpu_flags": reported_cpu_flags(), "amx_attention": bool(kernels.attention_amx_available(HEAD_DIM)), "layers": LAYERS}
    print(json.dumps(record | {"context": CONTEXT, "cells": cells}))


def flash_cells(kernels, context: int, qs: list[int], repeats: int) -> list[dict]:
    """Native against ATen's flash attention for one layer of the embedded model (3 KV heads of 3 query heads each),
    q new tokens after ``context`` cached ones, causal among the new ones; median ms of ``repeats``, interleaved."""
    cells = []
    for q in qs:
        cache = torch.randn(1, 2 * KV_HEADS, context + q, HEAD_DIM)
        keys, values = cache[:, :KV_HEADS], cache[:, KV_HEADS:]
        query, mask = torch.randn(1, KV_HEADS, GROUP * q, HEAD_DIM), torch.zeros(1, 1, GROUP * q, context + q)
        for i in range(q):  # the query row of head g and token i sees the context and tokens 0..i
            mask[0, 0, i::q, context + i + 1 :] = float("-inf")
        calls = {
            "native": lambda: kernels.cached_attention(query, keys, values, mask),
            "flash": lambda: F.scaled_dot_product_attention(query, keys, values, attn_mask=mask),
        }
        runs = {name: [] for name in calls}
        for call in calls.values():
            call()  # warm-up
        for _ in range(repeats):
            for name, call in calls.items():
                runs[name].append(clocked(call)[1] * 1e3)
        ms = {name: statistics.median(t) for name, t in runs.items()}
        gflops = 4 * KV_HEADS * GROUP * q * (context + q) * HEAD_DIM / 1e6  # q·k and p·v, every key (masked too)
        cell = {"context": context, "q": q} | {f"{n}_ms": round(v, 3) for n, v in ms.items()}
        cell |= {"flash_over_native": round(ms["flash"] / ms["native"], 2), "native_gflop_s": round(gflops / ms["native"], 1)}
        cells.append(cell)
        print(cell, file=sys.stderr)
    return cells


def flash(args) -> None:
    """The native attention against ATen's flash attention (what a forward of more new tokens than the native
    attention takes uses), one layer, from a decode step's q to a prefill chunk's, at each ``--contexts``.

    Knows: the embedded model's heads (9 query, 3 KV, head_dim 64), batch 1, a causal mask among the new tokens.
    Does not know: the layer's linears (``forward.py floor`` has the whole forward and its parts).
    """
    kernels = native_or_exit("flash")
    cells = [c for context in args.contexts for c in flash_cells(kernels, context, args.qs, args.repeats)]
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "threads": torch.get_num_threads(), "cells": cells}))


def argmax(args) -> None:
    """The greedy token of each row: torch's CPU argmax against ``sampling.greedy_tokens`` (numpy's), in microseconds.

    Rows of the embedded model's 49,152-token vocabulary: 1 (a plain decode step), 4 (a verify of EAGLE's default
    tree), 16 (a batch-16 step). Medians of ``--repeats`` rounds of 500 calls with [min, max], the two alternating.
    """
    cells = []
    for rows in (1, 4, 16):
        logits = torch.randn(rows, VOCAB)
        assert greedy_tokens(logits) == logits.argmax(-1).tolist()
        runs = {"torch": [], "greedy_tokens": []}
        for _ in range(args.repeats):
            runs["torch"].append(per_call_us(lambda _: logits.argmax(-1).tolist(), range(ARGMAX_CALLS)))
            runs["greedy_tokens"].append(per_call_us(lambda _: greedy_tokens(logits), range(ARGMAX_CALLS)))
        cell = {"rows": rows} | {k: [round(statistics.median(v), 1), round(min(v), 1), round(max(v), 1)] for k, v in runs.items()}
        cells.append(cell)
        print(cell, file=sys.stderr)
    print(json.dumps({"cpu_flags": reported_cpu_flags(), "threads": torch.get_num_threads(), "cells": cells}))


def main() -> None:
    parser, sub = command_line(__doc__)
    p = subcommand(sub, "linear", linear)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    subcommand(sub, "linear-pack", linear_pack)
    subcommand(sub, "amx-probe", amx_probe).add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64])
    subcommand(sub, "attention", attention).add_argument("--rounds", type=int, default=7)
    p = subcommand(sub, "flash", flash)
    p.add_argument("--contexts", type=int, nargs="+", default=[CONTEXT, 4096])
    p.add_argument("--qs", type=int, nargs="+", default=[4, 8, 16, 32, 64, 128, 512])
    p.add_argument("--repeats", type=int, default=7)
    subcommand(sub, "argmax", argmax).add_argument("--repeats", type=int, default=7)
    run_subcommand(parser)


if __name__ == "__main__":
    main()
