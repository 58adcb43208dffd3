"""Greedy outputs with a bf16 KV cache against an fp32 one: how often they agree, and how decided the target was
where they part.

Knows: one copy of the embedded model in fp32 on the native kernels, run greedily on workload prompts (the first
``--prompts`` of the shipped 100, in file order: every language), once with each cache dtype
(``Transformer.kv_dtype``), both at batch ``--batch-size`` on the same engine code. Where an output parts from the
fp32 cache's, it reports the position and the gap, in each run's own logits, between its choice and the other
run's (``bench/margins.py``): rounding the cache moves logits by a little, so the runs can only part where those
gaps are small.
Does not know: speed (``kv_dtype_forward.py``).
Usage: python benchmarks/kv_bf16_agreement.py [--prompts 30] [--max-tokens 128]. The last stdout line is one JSON
document.
"""

import argparse
import json
import statistics
import sys

import torch

from speculab.bench.agreement import first_difference, prefix_agreement
from speculab.bench.margins import MarginsByRequest
from speculab.bench.workload import load_workload
from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine
from speculab.models.linear import linear_kind
from speculab.runtime import load
from speculab.sampling import SamplingParams


def run(model, kv_dtype, prompts, max_tokens: int, batch_size: int):
    model.kv_dtype = kv_dtype
    engine = Engine(model, max_batch=batch_size, token_logits=True)
    margins = MarginsByRequest()
    requests = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True), on_token=margins.add)
    return [r.output_ids for r in requests], margins.of(requests)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    loaded = load(None, "float32")
    items = load_workload()[: args.prompts]
    prompts = [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]
    fp32, fp32_margins = run(loaded.model, torch.float32, prompts, args.max_tokens, args.batch_size)
    bf16, bf16_margins = run(loaded.model, torch.bfloat16, prompts, args.max_tokens, args.batch_size)
    parted = []
    for item, a, b, ma, mb in zip(items, fp32, bf16, fp32_margins, bf16_margins, strict=True):
        at = first_difference(a, b)
        if at is None or at >= min(len(a), len(b)):
            continue
        gap_fp32, exact_fp32 = ma[at].gap_to(b[at])
        gap_bf16, exact_bf16 = mb[at].gap_to(a[at])
        parted.append(
            {
                "id": item.id,
                "domain": item.domain,
                "position": at,
                "fp32_gap": round(gap_fp32, 4),
                "fp32_gap_exact": exact_fp32,
                "bf16_gap": round(gap_bf16, 4),
                "bf16_gap_exact": exact_bf16,
            }
        )
        print(parted[-1], file=sys.stderr)
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


if __name__ == "__main__":
    main()
