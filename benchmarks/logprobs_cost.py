"""What asking for logprobs costs: plain and EAGLE decoding with and without ``logprobs`` (5 top tokens), in turns.

At batch 1 (6 prompts) and 16 (16 prompts), greedy, 48 tokens each, prefills from a warmed prompt cache: the engines
with and without logprobs take turns of 0.25 s on their own clocks (``bench/turns.py``) in ``--rounds`` rounds; tok/s
with logprobs over tok/s without, per round, median and range.

    .venv/bin/python benchmarks/logprobs_cost.py

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics

from speculab.bench.turns import OwnClock, Turn, take_turns
from speculab.bench.workload import interleave_domains, load_workload
from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine, PromptCache
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.runtime import load
from speculab.sampling import SamplingParams
from speculab.testbed import testbed


def start(loaded, prompts, proposer, batch: int, logprobs: int | None, cache: PromptCache) -> Turn:
    clock = OwnClock()
    engine = Engine(loaded.model, batch, 2048, loaded.tokenizer.stop_ids, proposer, cache, clock=clock)
    params = SamplingParams(max_tokens=48, ignore_eos=True, logprobs=logprobs)
    requests = [engine.add_request(p, params) for p in prompts]
    return Turn(engine, requests, clock, started=clock())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    loaded = load(dtype="float32")
    prompts = [loaded.tokenizer.encode_chat(i.message_dicts()) for i in interleave_domains(load_workload(), 16)]
    cache, rows = PromptCache(), []
    options = {m: proposer_options(parse_method(m), loaded) for m in ("baseline", "eagle")}
    for m in options:  # every prefill once, the target's and the head's
        take_turns([start(loaded, prompts, new_proposer(parse_method(m), options[m]), 16, None, cache)])
    for method in options:
        for batch, n in ((1, 6), (16, 16)):
            ratios = []
            for _ in range(args.rounds):
                turns = [
                    start(loaded, prompts[:n], new_proposer(parse_method(method), options[method]), batch, lp, cache) for lp in (5, None)
                ]
                take_turns(turns, 0.25)
                with_lp, without = (sum(len(r.output_ids) for r in t.requests) / t.elapsed for t in turns)
                ratios.append(with_lp / without)
            rows.append(
                {"method": method, "batch_size": batch, "with_over_without": statistics.median(ratios), "range": [min(ratios), max(ratios)]}
            )
            print(
                f"{method:8s} b{batch}: tok/s with logprobs / without {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]",
                flush=True,
            )
    print(json.dumps({"rows": rows, "machine": {"cpu": testbed()["cpu"], "flags": reported_cpu_flags()}, "args": vars(args)}))


if __name__ == "__main__":
    main()
