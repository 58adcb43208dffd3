"""EAGLE tree shapes at batch 1 on held-out prompts: τ, acceptance by depth, tok/s and speedup over plain decoding.

Picks the batch-1 tree of a head without looking at the benchmark's workload: the prompts are training-share
prompts (``DataSpec`` seed 2000) from files none of the heads trained on (their ``training_files.json``).
Each method spec (``speculab.methods`` syntax) runs greedily at batch 1 on the embedded model in the
machine's dtype; tok/s is the decode rate (each request from its first token to its last: prefill left
out), repeats are interleaved, figures are medians with [min, max]. Usage:
python benchmarks/eagle_trees.py --specs 'eagle3:num_steps=4,topk=1,num_draft_tokens=5' ... [--prompts 12]
[--max-tokens 96] [--repeats 3]. The last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import time

from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine
from speculab.methods import drafter_path, new_proposer, parse_method, proposer_options
from speculab.models.linear import linear_kind
from speculab.runtime import load
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats
from speculab.train.training_prompts import held_out_prompts


def used_sources(specs) -> set[str]:
    """Every source file a drafter in ``specs`` trained on (its ``training_files.json``)."""
    used = set()
    for spec in specs:
        folder = drafter_path(spec)
        if folder and (folder / "training_files.json").exists():
            used |= set(json.loads((folder / "training_files.json").read_text()))
    return used


def timed(proposer, spent: list[float]):
    """The proposer with its ``propose`` (the head's catch-up on accepted tokens plus the tree's growth) timed."""
    propose = proposer.propose

    def wrapper(state):
        started = time.perf_counter()
        drafts = propose(state)
        spent.append(time.perf_counter() - started)
        return drafts

    proposer.propose = wrapper
    return proposer


def run(loaded, proposer, prompts, max_tokens: int) -> tuple[float, int, SpecStats, float]:
    """(decode seconds, tokens decoded after the first, merged stats, seconds spent drafting)."""
    spent: list[float] = []
    engine = Engine(loaded.model, 1, max(map(len, prompts)) + max_tokens + 64, loaded.tokenizer.stop_ids, timed(proposer, spent))
    params = SamplingParams(max_tokens=max_tokens)
    requests = engine.generate(prompts, [params] * len(prompts))
    # decode only: from each request's first token (prefill and the first token left out) to its last
    seconds = sum(r.token_times[-1] - r.token_times[0] for r in requests)
    stats = SpecStats()
    for r in requests:
        stats.merge(r.stats)
    return seconds, sum(len(r.output_ids) - 1 for r in requests), stats, sum(spent)


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="+", required=True)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    loaded = load(None)
    specs = [parse_method("baseline")] + [parse_method(s) for s in args.specs]
    options = {s.label: proposer_options(s, loaded) for s in specs}
    prompts = held_out_prompts(loaded.tokenizer, used_sources(specs), args.prompts, seed=2000)
    run(loaded, new_proposer(specs[0], options[specs[0].label]), prompts[:1], 8)  # warm-up
    rates: dict[str, list[float]] = {s.label: [] for s in specs}
    drafting: dict[str, list[float]] = {s.label: [] for s in specs}  # seconds drafting per draft level
    stats: dict[str, SpecStats] = {}
    for _ in range(args.repeats):
        for spec in specs:
            seconds, tokens, st, spent = run(loaded, new_proposer(spec, options[spec.label]), prompts, args.max_tokens)
            rates[spec.label].append(tokens / seconds)
            levels = st.steps * spec.params.get("num_steps", 0)
            drafting[spec.label].append(spent / levels if levels else 0.0)
            stats[spec.label] = st  # greedy: the same every repeat
            print(f"{spec.label}: {tokens / seconds:.1f} tok/s, tau {st.mean_acceptance_length:.2f}", file=sys.stderr, flush=True)
    base = statistics.median(rates[specs[0].label])
    forward_s = 1 / base  # one plain decoding step: a one-token target forward plus sampling
    rows = []
    for spec in specs:
        st = stats[spec.label]
        rows.append(
            {
                "method": spec.label,
                "tok_s": spread(rates[spec.label]),
                "speedup": round(statistics.median(rates[spec.label]) / base, 3),
                "speedup_range": [round(min(rates[spec.label]) / base, 3), round(max(rates[spec.label]) / base, 3)],
                "tau": round(st.mean_acceptance_length, 3) if st.steps else 1.0,
                "accepted_per_position": st.accepted_per_position,
                "conditional_acceptance": [round(c, 3) for c in st.conditional_acceptance],
                "draft_tokens_per_step": round(st.draft_nodes / st.steps, 2) if st.steps else 0,
                # drafting time per tree level (catch-up included) over one plain decoding step
                "draft_level_cost": round(statistics.median(drafting[spec.label]) / forward_s, 3),
            }
        )
        print(
            f"| {spec.label} | {rows[-1]['tok_s']['median']} [{rows[-1]['tok_s']['min']}, {rows[-1]['tok_s']['max']}] | "
            f"{rows[-1]['speedup']}× | {rows[-1]['tau']} | {rows[-1]['conditional_acceptance']} | {rows[-1]['draft_level_cost']} |"
        )
    print(
        json.dumps(
            {
                "prompts": len(prompts),
                "max_tokens": args.max_tokens,
                "repeats": args.repeats,
                "dtype": loaded.dtype,
                "linear_kernels": linear_kind(loaded.model),
                "cpu_flags": reported_cpu_flags(),
                "rows": rows,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
