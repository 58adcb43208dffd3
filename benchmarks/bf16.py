"""Where bf16 rounding moves the target's outputs: a bf16 KV cache against an fp32 one, and a one-token forward
against a many-token one.

Subcommands (``--help`` on each says more):
- ``kv-agreement``: greedy outputs with a bf16 KV cache against an fp32 one: how often they agree, and how decided
  the target was where they part;
- ``rounding``: how far bf16 rounding moves the logits between a one-token and a many-token forward
  (``bench/divergence.ROUNDING_SPREAD`` comes from here).
Knows: the embedded model, the first workload prompts in file order (every language), greedy decoding.
Does not know: speed (``forward_kernels.py kv-dtype``, ``kernels_alone.py attention``).
Usage: python benchmarks/bf16.py COMMAND [options]. The last stdout line is one JSON document.
"""

import json
import statistics
import sys

import torch
from common import command_line, run_subcommand, subcommand

from speculab.bench.agreement import first_difference, prefix_agreement
from speculab.bench.margins import MarginsByRequest
from speculab.bench.workload import load_workload
from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine
from speculab.models.linear import linear_kind
from speculab.models.llama import causal_batch, prefill
from speculab.runtime import load
from speculab.sampling import SamplingParams


def greedy_with_margins(model, kv_dtype, prompts, max_tokens: int, batch_size: int):
    model.kv_dtype = kv_dtype
    engine = Engine(model, max_batch=batch_size, token_logits=True)
    margins = MarginsByRequest()
    requests = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True), on_token=margins.add)
    return [r.output_ids for r in requests], margins.of(requests)


def parting(item, a: list[int], b: list[int], ma, mb) -> dict | None:
    """Where the fp32 cache's output ``a`` and the bf16 one's ``b`` first part, and each run's gap to the other's
    choice there (None where they do not part)."""
    at = first_difference(a, b)
    if at is None or at >= min(len(a), len(b)):
        return None
    gap_fp32, exact_fp32 = ma[at].gap_to(b[at])
    gap_bf16, exact_bf16 = mb[at].gap_to(a[at])
    return {
        "id": item.id,
        "domain": item.domain,
        "position": at,
        "fp32_gap": round(gap_fp32, 4),
        "fp32_gap_exact": exact_fp32,
        "bf16_gap": round(gap_bf16, 4),
        "bf16_gap_exact": exact_bf16,
    }


def kv_agreement(args) -> None:
    """Greedy outputs with a bf16 KV cache against an fp32 one: how often they agree, and how decided the target was
    where they part.

    Knows: one copy of the embedded model in fp32 on the native kernels, run greedily on workload prompts (the first
    ``--prompts`` of the shipped 100, in file order: every language), once with each cache dtype
    (``Transformer.kv_dtype``), both at batch ``--batch-size`` on the same engine code. Where an output parts from the
    fp32 cache's, it reports the position and the gap, in each run's own logits, between its choice and the other
    run's (``bench/margins.py``): rounding the cache moves logits by a little, so the runs can only part where those
    gaps are small.
    """
    loaded = load(None, "float32")
    items = load_workload()[: args.prompts]
    prompts = [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]
    fp32, fp32_margins = greedy_with_margins(loaded.model, torch.float32, prompts, args.max_tokens, args.batch_size)
    bf16, bf16_margins = greedy_with_margins(loaded.model, torch.bfloat16, prompts, args.max_tokens, args.batch_size)
    parted = []
    for found in map(parting, items, fp32, bf16, fp32_margins, bf16_margins):
        if found is not None:
            parted.append(found)
            print(found, file=sys.stderr)
    gaps = [p["fp32_gap"] for p in parted]
    summary = {
        "prompts": len(items),
        "identical_outputs": len(items) - len(parted),
        "prefix_agreement": round(prefix_agreement(bf16, fp32), 4),
        "parted": len(parted),
        "largest_fp32_gap_where_parted": max(gaps) if gaps else None,
        "median_fp32_gap_where_parted": round(statistics.median(gaps), 4) if gaps else None,
    }
    print(summary, file=sys.stderr)
    record = {"cpu_flags": reported_cpu_flags(), "linear_kernels": linear_kind(loaded.model), "max_tokens": args.max_tokens}
    print(json.dumps(record | {"batch_size": args.batch_size, "summary": summary, "parted": parted}))


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


def rounding(args) -> None:
    """How far bf16 rounding moves the target's logits between a one-token and a many-token forward.

    Plain decoding computes each position's logits in a one-token forward; verification computes them in one forward
    over many tokens, whose matmuls round differently. For a few workload prompts this decodes greedily one token at
    a time, then recomputes the same positions in a single forward, and reports per position: the largest logit
    difference over the vocabulary, in unit roundoffs u·|top logit| (u = eps / 2, 2^-8 in bf16), the top-1/top-2
    gaps, and where the two forwards' argmax differ.
    """
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


def main() -> None:
    parser, sub = command_line(__doc__)
    p = subcommand(sub, "kv-agreement", kv_agreement)
    p.add_argument("--prompts", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p = subcommand(sub, "rounding", rounding)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--tokens", type=int, default=48)
    run_subcommand(parser)


if __name__ == "__main__":
    main()
