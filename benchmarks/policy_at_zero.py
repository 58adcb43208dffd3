"""A method held by its policy at 0 draft nodes against the baseline, at one batch size, their engines taking turns.

What the adaptive row of ``make bench`` does where its tuned policy stops drafting: the EAGLE proposer is wrapped in
a policy of 0 nodes at every batch size, so every step is plain decoding with the drafter's bookkeeping around it.
Both engines run the bench's own rounds in turns (``bench.in_process.round_in_turns``: 16 workload prompts, 64
tokens, greedy, the prompt cache warm after the first round, which is not counted); one tok/s ratio per round.

    .venv/bin/python benchmarks/policy_at_zero.py --batch-size 8 --rounds 5

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics

from speculab.bench import in_process
from speculab.bench.settings import BenchConfig
from speculab.bench.workload import interleave_domains, load_workload
from speculab.methods import POLICY, parse_method, proposer_options
from speculab.speculative.policy import SpeculationPolicy
from speculab.testbed import testbed

HELD = "eagle:num_steps=3,topk=2,num_draft_tokens=4,batch_budget=4,draft_vocab=auto"  # make bench's EAGLE row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--method", default=HELD)
    args = ap.parse_args()
    specs = [parse_method("baseline"), parse_method(args.method)]
    cfg = BenchConfig(methods=tuple(specs), max_tokens=64, repeats=args.rounds)
    target = in_process.load_target(cfg, interleave_domains(load_workload(None), 16))
    options = {s.label: proposer_options(s, target.loaded) for s in specs}
    options[specs[1].label] |= {POLICY: SpeculationPolicy.from_caps({1: 0})}
    in_process.round_in_turns(target, specs, options, args.batch_size, cfg, None)  # fills the prompt cache: not counted
    rates, ratios = [], []
    for r in range(args.rounds):
        repeats = in_process.round_in_turns(target, specs, options, args.batch_size, cfg, None)
        rates.append([rep.tok_s for rep in repeats])
        ratios.append(repeats[1].tok_s / repeats[0].tok_s)
        print(f"round {r + 1}: baseline {rates[-1][0]:.1f} tok/s, held at 0 {rates[-1][1]:.1f}: {ratios[-1]:.4f}x", flush=True)
    print(f"held at 0 / baseline: median {statistics.median(ratios):.4f}x [{min(ratios):.4f}-{max(ratios):.4f}]")
    print(json.dumps({"testbed": testbed(), "batch_size": args.batch_size, "method": args.method, "tok_s": rates, "ratios": ratios}))


if __name__ == "__main__":
    main()
