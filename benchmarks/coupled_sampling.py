"""Coupled against rejection sampling on the embedded model: the noise's cost, acceptance, and tok/s.

1. The noise: one output position's exponentials over the whole vocabulary (``position_noise.exponentials``), median
   of ``--calls``, against a batch-1 decode step of plain sampling (the median step of a 64-token run).
Prefills come from a prompt cache warmed first (the target's and each drafter's), so every part measures decoding.
2. Acceptance (untimed): each method over ``--prompts`` workload prompts, 16 at a time, seeded, at each temperature,
   coupled and rejection; beside rejection's rate a, the bound coupled keeps by theory for sampled drafts, a / (2 - a)
   ((1 - TV) / (1 + TV) with TV = 1 - a); deterministic drafts are accepted alike in expectation.
3. tok/s at each of ``--speed-temperatures``, batch 1 (6 prompts) and 16 (16 prompts): every
   (method, mode) engine taking turns of 0.25 s on its own clock (``bench/turns.py``) in ``--rounds`` rounds; coupled
   over rejection per round, the median and range.
Every request is seeded and decodes ``--max-tokens`` (no stop at the end of text).

    .venv/bin/python benchmarks/coupled_sampling.py
    .venv/bin/python benchmarks/coupled_sampling.py --prompts 16 --no-acceptance --speed-temperatures 0.2 1.0

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from speculab.bench.turns import OwnClock, Turn, take_turns
from speculab.bench.workload import interleave_domains, load_workload
from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine, PromptCache
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.position_noise import exponentials
from speculab.runtime import load
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats
from speculab.testbed import testbed

METHODS = ("draft", "eagle", "ngram", "suffix")
MODES = ("coupled", "rejection")


def params_for(n: int, temperature: float, mode: str, max_tokens: int) -> list[SamplingParams]:
    """Seeded, every request its whole ``max_tokens`` (modes that sample other texts decode as many tokens)."""
    return [SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=1000 + i, verify=mode, ignore_eos=True) for i in range(n)]


def start(loaded, prompts, proposer, batch: int, params, cache: PromptCache | None = None) -> Turn:
    clock = OwnClock()
    engine = Engine(loaded.model, batch, 2048, loaded.tokenizer.stop_ids, proposer, cache, clock=clock)
    requests = [engine.add_request(p, q) for p, q in zip(prompts, params)]
    return Turn(engine, requests, clock, started=clock())


def noise_cost(loaded, prompt, calls: int) -> dict:
    vocab = loaded.model.config.vocab_size
    noise = []
    for t in range(calls):
        began = time.perf_counter()
        exponentials(7, t, vocab)
        noise.append(time.perf_counter() - began)
    engine = Engine(loaded.model, 1, 2048, loaded.tokenizer.stop_ids)
    engine.add_request(prompt, SamplingParams(max_tokens=64, temperature=0.7, seed=1, verify="rejection", ignore_eos=True))
    engine.step()  # the prefill
    steps = []
    while engine.has_work:
        began = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - began)
    noise_s, step_s = statistics.median(noise), statistics.median(steps)
    return {"vocab": vocab, "noise_us": noise_s * 1e6, "step_us": step_s * 1e6, "share_of_step": noise_s / step_s}


def acceptance(loaded, prompts, options, temperatures, max_tokens: int, cache: PromptCache) -> list[dict]:
    rows = []
    for name in METHODS:
        spec = parse_method(name)
        for temperature in temperatures:
            rates = {}
            for mode in MODES:
                params = params_for(len(prompts), temperature, mode, max_tokens)
                turn = start(loaded, prompts, new_proposer(spec, options[name]), 16, params, cache)
                take_turns([turn])
                total = SpecStats()
                for r in turn.requests:
                    total.merge(r.stats)
                rates[mode] = total.acceptance_rate
            a = rates["rejection"]
            rows.append({"method": name, "temperature": temperature, **rates, "sampled_draft_bound": a / (2 - a) if a else None})
            print(f"{name:7s} T={temperature}: coupled {rates['coupled']:.3f} rejection {a:.3f}", flush=True)
    return rows


def warm_cache(loaded, prompts, options) -> PromptCache:
    """Every prompt's prefill, the target's and each drafter's, computed once: the speeds compare decoding."""
    cache = PromptCache()
    for name in ("baseline", *METHODS):
        turn = start(
            loaded, prompts, new_proposer(parse_method(name), options[name]), 16, [SamplingParams(max_tokens=1)] * len(prompts), cache
        )
        take_turns([turn])
    return cache


def speeds(loaded, prompts, options, temperature: float, rounds: int, max_tokens: int, cache: PromptCache) -> list[dict]:
    rows = []
    for batch, n in ((1, 6), (16, 16)):
        ratios: dict[str, list[float]] = {name: [] for name in ("baseline", *METHODS)}
        for _ in range(rounds):
            turns = {}
            for name in ratios:
                spec = parse_method(name)
                for mode in MODES:
                    proposer = new_proposer(spec, options[name])
                    turns[name, mode] = start(loaded, prompts[:n], proposer, batch, params_for(n, temperature, mode, max_tokens), cache)
            take_turns(list(turns.values()), 0.25)
            rate = {k: sum(len(r.output_ids) for r in t.requests) / t.elapsed for k, t in turns.items()}
            for name in ratios:
                ratios[name].append(rate[name, "coupled"] / rate[name, "rejection"])
        for name, r in ratios.items():
            rows.append({"method": name, "batch_size": batch, "coupled_over_rejection": statistics.median(r), "range": [min(r), max(r)]})
            print(f"{name:8s} b{batch}: coupled/rejection tok/s {statistics.median(r):.3f} [{min(r):.3f}-{max(r):.3f}]", flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=48, help="the acceptance part's prompts (the speeds take 6 and 16 of them)")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.2, 0.7, 1.0])
    p.add_argument("--speed-temperatures", type=float, nargs="+", default=[0.7])
    p.add_argument("--no-acceptance", action="store_true", help="the speeds only")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args()
    torch.manual_seed(0)
    loaded = load(dtype="float32")
    items = interleave_domains(load_workload(), args.prompts)
    prompts = [loaded.tokenizer.encode_chat(i.message_dicts()) for i in items]
    options = {name: proposer_options(parse_method(name), loaded) for name in ("baseline", *METHODS)}
    cost = noise_cost(loaded, prompts[0], args.calls)
    print(f"noise {cost['noise_us']:.0f} us a position, {100 * cost['share_of_step']:.1f}% of a batch-1 step ({cost['step_us']:.0f} us)")
    cache = warm_cache(loaded, prompts, options)
    rows = [] if args.no_acceptance else acceptance(loaded, prompts, options, args.temperatures, args.max_tokens, cache)
    speed = []
    for temperature in args.speed_temperatures:
        print(f"tok/s at T = {temperature}", flush=True)
        speed += [
            r | {"temperature": temperature} for r in speeds(loaded, prompts, options, temperature, args.rounds, args.max_tokens, cache)
        ]
    machine = {"cpu": testbed()["cpu"], "flags": reported_cpu_flags()}
    print(json.dumps({"noise": cost, "acceptance": rows, "speed": speed, "machine": machine, "args": vars(args)}))


if __name__ == "__main__":
    main()
