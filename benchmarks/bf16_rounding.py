"""How far bf16 rounding moves the target's logits between a one-token and a many-token forward.

Plain decoding computes each position's logits in a one-token forward; verification computes them in one
forward over many tokens, whose matmuls round differently. For a few workload prompts this decodes greedily
one token at a time, then recomputes the same positions in a single forward, and reports per position: the
largest logit difference over the vocabulary, in unit roundoffs u·|top logit| (u = eps / 2, 2^-8 in bf16),
the top-1/top-2 gaps, and where the two forwards' argmax differ. ``bench/divergence.ROUNDING_SPREAD`` comes
from here. Usage: python benchmarks/bf16_rounding.py [--dtype bfloat16] [--prompts 3] [--tokens 48].
The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys

import torch

from speculab.bench.workload import load_workload
from speculab.cpu import reported_cpu_flags
from speculab.models.llama import causal_batch, prefill
from speculab.runtime import load


def one_token_logits(model, ids: list[int], tokens: int) -> tuple[list[int], torch.Tensor]:
    """Greedy tokens and the logits [tokens + 1, vocab] each was chosen from, one token a forward."""
    cache = model.new_cache(1, len(ids) + tokens + 1)
    rows, out = [prefill(model, cache, 0, ids)[-1].logits[0, -1].float()], []
    for i in range(tokens):
        out.append(int(rows[-1].argmax()))
        fwd = causal_batch(torch.tensor([0]), torch.tensor([len(ids) + i]), 1)
        rows.append(model(torch.tensor([[out[-1]]]), fwd, cache).logits[0, -1].float())
        cache.commit(0, len(ids) + i + 1)
    return out, torch.stack(rows)


def wide_logits(model, ids: list[int], generated: list[int]) -> torch.Tensor:
    """The same positions' logits [len(generated) + 1, vocab] from one forward over the last prompt token and the output."""
    cache = model.new_cache(1, len(ids) + len(generated) + 1)
    prefill(model, cache, 0, ids[:-1])
    fwd = causal_batch(torch.tensor([0]), torch.tensor([len(ids) - 1]), len(generated) + 1)
    return model(torch.tensor([[ids[-1], *generated]]), fwd, cache).logits[0].float()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--tokens", type=int, default=48)
    args = p.parse_args()
    loaded = load(None, args.dtype)
    u = torch.finfo(loaded.model.dtype).eps / 2
    spread, gaps, flips = [], [], 0
    with torch.no_grad():
        for item in load_workload()[: args.prompts]:
            ids = loaded.tokenizer.encode_chat(item.message_dicts())
            generated, one = one_token_logits(loaded.model, ids, args.tokens)
            wide = wide_logits(loaded.model, ids, generated)
            top = one.topk(2, dim=-1).values
            spread += ((one - wide).abs().max(-1).values / (u * top[:, 0].abs())).tolist()
            gaps += (top[:, 0] - top[:, 1]).tolist()
            flips += int((one.argmax(-1) != wide.argmax(-1)).sum())
            print(f"{item.id}: max spread {max(spread):.2f} u·|top|, {flips} argmax flips so far", file=sys.stderr)
    result = {
        "cpu_flags": reported_cpu_flags(),
        "dtype": loaded.dtype,
        "positions": len(spread),
        "spread_in_roundoffs": {"median": statistics.median(spread), "max": max(spread)},
        "top2_gap_median": statistics.median(gaps),
        "argmax_flips": flips,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
