"""What a draft model of each shape costs a token on this CPU, and the acceptance it would need to pay.

For each shape (hidden size, layers; 64-wide heads, one KV head, an MLP four times the width, tied embeddings, the
target's vocabulary, bf16 weights as `speculab train draft` writes them), a random draft model is timed drafting one
token after a 1,200-token context over its 8,192 most frequent tokens (`draft_vocab=auto`; the ranking is the
shipped draft model's), interleaved with the target's one-token forward and its (k+1)-token verify: medians of
``--repeats``. Weights do not change the cost, so no training is needed for this half of the curve.

From the costs, what each shape must reach: a step of k draft tokens costs T(k+1)/T(1) + k·c target forwards (c the
draft token's cost) and yields τ tokens, so the speedup is τ / (T(k+1)/T(1) + k·c) and 1.2x needs τ = 1.2 (T(k+1)/T(1)
+ k·c); and the acceptance a that gives that τ if each draft token were accepted alike and independently (Leviathan et
al.: τ = (1 - a^(k+1)) / (1 - a)). The model is checked against the shipped draft model (192x3), whose measured τ at
k = 3 it turns into the speedup `compare llama.cpp --method draft` measured.
Usage: python benchmarks/draft_shapes.py [--shapes 128x2 192x3 ...] [--k 3] [--repeats 15].
The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from speculab.methods import DEFAULT_DRAFT, make_proposer
from speculab.models.draft_vocab import load_token_ranking
from speculab.models.llama import causal_batch, prefill
from speculab.models.loading import load_model
from speculab.runtime import load
from speculab.train.draft import draft_config

CONTEXT, DRAFT_VOCAB = 1200, 8192
# the shipped draft model at k = 3 on 8 workload prompts: 807 accepted of 6,768 drafted over 2,256 steps, measured 1.08x
# (benchmarks/results/peers/epyc-zen5-2026-12-05/speculation-draft-f32.json)
SHIPPED_TAU = (807 + 2256) / 2256


def random_draft(folder: Path, target_raw: dict, hidden: int, layers: int) -> Path:
    import transformers

    config = transformers.LlamaConfig(**draft_config(target_raw, hidden, layers, 4 * hidden))
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    return folder


def median_ms(fn, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1e3


def tau_of(a: float, k: int) -> float:
    return k + 1 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def needed_acceptance(k: int, tau: float) -> float | None:
    """The a whose τ is ``tau`` (bisection; None if even a = 1 falls short)."""
    if tau_of(1.0, k) < tau:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tau_of(mid, k) < tau else (lo, mid)
    return hi


def shape_cost(target, target_raw, ranking, shape: str, repeats: int, t_one) -> dict:
    hidden, layers = map(int, shape.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = random_draft(Path(tmp), target_raw, hidden, layers)
        parameters = sum(t.numel() for t in load_file(folder / "model.safetensors").values())  # tied: stored once
        draft = load_model(folder, torch.float32)
    context = torch.randint(0, target.config.vocab_size, (CONTEXT,)).tolist()
    cache = draft.new_cache(1, CONTEXT + 64)
    prefill(draft, cache, 0, context)
    reduced = make_proposer("draft", model=draft, draft_vocab=ranking, num_speculative_tokens=1).reduced
    one = torch.tensor([[context[0]]])
    step = lambda: draft(one, causal_batch(torch.arange(1), torch.tensor([CONTEXT]), 1), cache, lm_head=reduced.logits)  # noqa: E731
    for _ in range(3):  # warm-up: first calls pack weights and size buffers
        step(), t_one()
    ms, target_ms = [], []
    for _ in range(repeats):  # interleaved with the target, so drift reaches both
        ms.append(median_ms(step, 1))
        target_ms.append(t_one())
    return {
        "shape": shape,
        "hidden": hidden,
        "layers": layers,
        "ms": statistics.median(ms),
        "target_ms": statistics.median(target_ms),
        "parameters": parameters,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["128x2", "192x3", "256x3", "384x4", "512x4", "576x6"])
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    loaded = load(None, "float32")
    target, target_raw = loaded.model, json.loads((loaded.path / "config.json").read_text())
    context = torch.randint(0, target.config.vocab_size, (CONTEXT,)).tolist()
    t_cache = target.new_cache(1, CONTEXT + 64)
    prefill(target, t_cache, 0, context)
    one, many = torch.tensor([[context[0]]]), torch.tensor([context[: args.k + 1]])
    t_one = lambda: median_ms(lambda: target(one, causal_batch(torch.arange(1), torch.tensor([CONTEXT]), 1), t_cache), 1)  # noqa: E731
    t_many = lambda: median_ms(lambda: target(many, causal_batch(torch.arange(1), torch.tensor([CONTEXT]), args.k + 1), t_cache), 1)  # noqa: E731
    pairs = [(t_one(), t_many()) for _ in range(args.repeats + 3)][3:]  # the first three warm up
    verify = statistics.median(m / o for o, m in pairs)
    ranking = load_token_ranking(DEFAULT_DRAFT, target.config.vocab_size)[:DRAFT_VOCAB]
    rows = []
    for shape in args.shapes:
        row = shape_cost(target, target_raw, ranking, shape, args.repeats, t_one)
        c = row["ms"] / row["target_ms"]
        step = verify + args.k * c  # target forwards a speculating step costs
        row |= {
            "cost": c,
            "speedup_at_shipped_tau": SHIPPED_TAU / step,
            "tau_for_1.2x": 1.2 * step,
            "acceptance_for_1.2x": needed_acceptance(args.k, 1.2 * step),
        }
        rows.append(row)
        print(f"{shape:>7}  {row['ms']:.2f} ms  c={c:.3f}  1.2x needs tau {row['tau_for_1.2x']:.2f}", file=sys.stderr)
    print(
        json.dumps(
            {"context": CONTEXT, "k": args.k, "verify_cost": verify, "draft_vocab": DRAFT_VOCAB, "shipped_tau": SHIPPED_TAU, "shapes": rows}
        )
    )


if __name__ == "__main__":
    main()
