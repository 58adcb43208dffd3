"""Sampling, measured: coupled against rejection sampling, one draw's cost, what logprobs cost, and seeded requests
against a running server.

Subcommands (``--help`` on each says more):
- ``coupled``: coupled against rejection sampling on the embedded model: the noise's cost, acceptance, and tok/s;
- ``draw``: one sampled token's draw from one 49,152-token row, rejection's path against the coupled race;
- ``logprobs``: plain and EAGLE decoding with and without ``logprobs`` (5 top tokens), in turns;
- ``seeded``: seeded requests against a running OpenAI-compatible server, each alone, then all at once.
Knows: the embedded model in fp32, workload prompts (the domains in turn), engines taking turns of 0.25 s on their
own clocks (``bench/turns.py``) where tok/s are set side by side, prefills from a warmed prompt cache.
Does not know: the server's own costs (``serving.py``), greedy agreement across dtypes (``bf16.py``).
Usage: python benchmarks/sampling.py COMMAND [options]. The last stdout line is one JSON document.
"""

from __future__ import annotations

import json
import statistics
import timeit
from concurrent.futures import ThreadPoolExecutor

import httpx
import torch
from common import clocked, command_line, run_subcommand, subcommand

from speculab.bench.turns import OwnClock, Turn, take_turns
from speculab.bench.workload import interleave_domains, load_workload
from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.position_noise import PositionNoise, exponentials
from speculab.prompt_cache import PromptCache
from speculab.runtime import load
from speculab.sampling import SamplingParams, sampling_probs
from speculab.speculative.stats import SpecStats
from speculab.speculative.tree import Draft, VerifyTree
from speculab.speculative.verify import verify_by_rejection, verify_coupled
from speculab.testbed import testbed

METHODS = ("draft", "eagle", "ngram", "suffix")
MODES = ("coupled", "rejection")
VOCAB = 49152


def machine() -> dict:
    return {"cpu": testbed()["cpu"], "flags": reported_cpu_flags()}


def workload_prompts(loaded, n: int) -> list[list[int]]:
    return [loaded.tokenizer.encode_chat(i.message_dicts()) for i in interleave_domains(load_workload(), n)]


def start(loaded, prompts, proposer, batch: int, params: list[SamplingParams], cache: PromptCache | None = None) -> Turn:
    """An engine of ``batch`` slots on its own clock with every prompt queued: a turn for ``take_turns``."""
    clock = OwnClock()
    engine = Engine(loaded.model, batch, 2048, loaded.tokenizer.stop_ids, proposer, cache, clock=clock)
    requests = [engine.add_request(p, q) for p, q in zip(prompts, params)]
    return Turn(engine, requests, clock, started=clock())


def tok_s(turn: Turn) -> float:
    return sum(len(r.output_ids) for r in turn.requests) / turn.elapsed


def warm_cache(loaded, prompts, options: dict) -> PromptCache:
    """Every prompt's prefill, the target's and each drafter's, computed once: the speeds compare decoding."""
    cache = PromptCache()
    for name in options:
        proposer = new_proposer(parse_method(name), options[name])
        take_turns([start(loaded, prompts, proposer, 16, [SamplingParams(max_tokens=1)] * len(prompts), cache)])
    return cache


def params_for(n: int, temperature: float, mode: str, max_tokens: int) -> list[SamplingParams]:
    """Seeded, every request its whole ``max_tokens`` (modes that sample other texts decode as many tokens)."""
    return [
        SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=1000 + i, sampling_verify=mode, ignore_eos=True)
        for i in range(n)
    ]


def noise_cost(loaded, prompt, calls: int) -> dict:
    vocab = loaded.model.config.vocab_size
    noise = [clocked(lambda t=t: exponentials(7, t, vocab))[1] for t in range(calls)]
    engine = Engine(loaded.model, 1, 2048, loaded.tokenizer.stop_ids)
    engine.add_request(prompt, SamplingParams(max_tokens=64, temperature=0.7, seed=1, sampling_verify="rejection", ignore_eos=True))
    engine.step()  # the prefill
    steps = []
    while engine.has_work:
        steps.append(clocked(engine.step)[1])
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
            for name in ratios:
                ratios[name].append(tok_s(turns[name, "coupled"]) / tok_s(turns[name, "rejection"]))
        for name, r in ratios.items():
            rows.append({"method": name, "batch_size": batch, "coupled_over_rejection": statistics.median(r), "range": [min(r), max(r)]})
            print(f"{name:8s} b{batch}: coupled/rejection tok/s {statistics.median(r):.3f} [{min(r):.3f}-{max(r):.3f}]", flush=True)
    return rows


def coupled(args) -> None:
    """Coupled against rejection sampling on the embedded model: the noise's cost, acceptance, and tok/s.

    1. The noise: one output position's exponentials over the whole vocabulary (``position_noise.exponentials``),
       median of ``--calls``, against a batch-1 decode step of plain sampling (the median step of a 64-token run).
    Prefills come from a prompt cache warmed first (the target's and each drafter's), so every part measures decoding.
    2. Acceptance (untimed): each method over ``--prompts`` workload prompts, 16 at a time, seeded, at each
       temperature, coupled and rejection; beside rejection's rate a, the bound coupled keeps by theory for sampled
       drafts, a / (2 - a) ((1 - TV) / (1 + TV) with TV = 1 - a); deterministic drafts are accepted alike in expectation.
    3. tok/s at each of ``--speed-temperatures``, batch 1 (6 prompts) and 16 (16 prompts): every (method, mode) engine
       taking turns of 0.25 s on its own clock in ``--rounds`` rounds; coupled over rejection per round, the median
       and range.
    Every request is seeded and decodes ``--max-tokens`` (no stop at the end of text).
    """
    torch.manual_seed(0)
    loaded = load(dtype="float32")
    prompts = workload_prompts(loaded, args.prompts)
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
    arguments = {k: v for k, v in vars(args).items() if k not in ("command", "run")}
    print(json.dumps({"noise": cost, "acceptance": rows, "speed": speed, "machine": machine(), "args": arguments}))


def draw(args) -> None:
    """One sampled token's draw from one 49,152-token row: rejection's path against the coupled race, noise included.

    ``verify_by_rejection`` on a draft-less tree (what plain sampling runs: the target's distribution, then
    ``torch.multinomial``) against ``verify_coupled`` with a fresh output position's noise each call
    (``position_noise``), and the two parts alone: the sampling distribution (``sampling_probs``) and the noise.
    Medians of ``--repeats`` runs of 100 calls.
    """
    torch.manual_seed(0)
    logits = torch.randn(1, VOCAB) * 3
    params = SamplingParams(temperature=0.7, seed=3)
    tree = VerifyTree.from_draft(5, Draft.empty())
    generator = torch.Generator().manual_seed(1)
    noise, position = PositionNoise(3, VOCAB), [0]

    def next_noise():
        position[0] += 1
        noise.forget_before(position[0])
        return noise.at([position[0]])

    calls = {
        "sampling_probs": lambda: sampling_probs(logits, params),
        "rejection_draw": lambda: verify_by_rejection(tree, sampling_probs(logits, params), generator),
        "coupled_draw": lambda: verify_coupled(tree, sampling_probs(logits, params), next_noise()),
        "noise": next_noise,
    }
    us = {}
    for name, call in calls.items():
        # timeit: many calls a timing, several timings, the median of them
        us[name] = statistics.median(t / 100 * 1e6 for t in timeit.repeat(call, number=100, repeat=args.repeats))
        print(f"{name:15s} {us[name]:7.1f} us", flush=True)
    print(json.dumps({"us": us, "vocab": VOCAB, "machine": machine()}))


def logprobs(args) -> None:
    """What asking for logprobs costs: plain and EAGLE decoding with and without ``logprobs`` (5 top tokens), in turns.

    At batch 1 (6 prompts) and 16 (16 prompts), greedy, 48 tokens each, prefills from a warmed prompt cache: the
    engines with and without logprobs take turns of 0.25 s on their own clocks in ``--rounds`` rounds; tok/s with
    logprobs over tok/s without, per round, median and range.
    """
    loaded = load(dtype="float32")
    prompts = workload_prompts(loaded, 16)
    options = {m: proposer_options(parse_method(m), loaded) for m in ("baseline", "eagle")}
    cache, rows = warm_cache(loaded, prompts, options), []
    for method in options:
        for batch, n in ((1, 6), (16, 16)):
            ratios = []
            for _ in range(args.rounds):
                turns = [
                    start(loaded, prompts[:n], new_proposer(parse_method(method), options[method]), batch, params, cache)
                    for params in ([SamplingParams(max_tokens=48, ignore_eos=True, logprobs=lp)] * n for lp in (5, None))
                ]
                take_turns(turns, 0.25)
                ratios.append(tok_s(turns[0]) / tok_s(turns[1]))
            rows.append(
                {"method": method, "batch_size": batch, "with_over_without": statistics.median(ratios), "range": [min(ratios), max(ratios)]}
            )
            print(
                f"{method:8s} b{batch}: tok/s with logprobs / without {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]",
                flush=True,
            )
    print(json.dumps({"rows": rows, "machine": machine(), "args": {"rounds": args.rounds}}))


def seeded(args) -> None:
    """Seeded requests against a running OpenAI-compatible server: each one's text alone, then all of them at once.

    Sends ``--requests`` workload prompts (the domains in turn) to ``/v1/chat/completions``, sampled at
    ``--temperature`` with seed ``--seed + i``: first one at a time, then all of them with ``--concurrency`` in flight,
    and counts the requests whose two texts are identical. Against ``speculab serve`` (coupled sampling for seeded
    requests, its default) every one should be; a server whose seeded text depends on what runs beside it (rejection
    sampling under speculation, vLLM's and SGLang's) shows here by how much. E.g.:
        speculab serve --method eagle --policy auto &
        python benchmarks/sampling.py seeded --url http://127.0.0.1:8000 --requests 64 --concurrency 16
    """
    with httpx.Client(base_url=args.url, timeout=600) as client:

        def text(body: dict) -> str:
            answer = client.post("/v1/chat/completions", json=body)
            answer.raise_for_status()
            return answer.json()["choices"][0]["message"]["content"]

        model = args.model or client.get("/v1/models").json()["data"][0]["id"]
        items = interleave_domains(load_workload(), args.requests)
        sampling = {"model": model, "max_tokens": args.max_tokens, "temperature": args.temperature}
        bodies = [sampling | {"messages": item.message_dicts(), "seed": args.seed + i} for i, item in enumerate(items)]
        with ThreadPoolExecutor(1) as pool:
            alone = list(pool.map(text, bodies))
        with ThreadPoolExecutor(args.concurrency) as pool:
            together = list(pool.map(text, bodies))
        version = client.get("/version").json() if client.get("/version").status_code == 200 else None
    same = sum(a == b for a, b in zip(alone, together))
    print(f"{same} of {len(bodies)} seeded requests read the same alone and {args.concurrency} at a time")
    record = {"requests": len(bodies), "identical": same, "concurrency": args.concurrency, "temperature": args.temperature}
    print(json.dumps(record | {"max_tokens": args.max_tokens, "model": model, "server": version}))


def main() -> None:
    parser, sub = command_line(__doc__)
    p = subcommand(sub, "coupled", coupled)
    p.add_argument("--prompts", type=int, default=48, help="the acceptance part's prompts (the speeds take 6 and 16 of them)")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.2, 0.7, 1.0])
    p.add_argument("--speed-temperatures", type=float, nargs="+", default=[0.7])
    p.add_argument("--no-acceptance", action="store_true", help="the speeds only")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=200)
    subcommand(sub, "draw", draw).add_argument("--repeats", type=int, default=7)
    subcommand(sub, "logprobs", logprobs).add_argument("--rounds", type=int, default=3)
    p = subcommand(sub, "seeded", seeded)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server's root (no /v1)")
    p.add_argument("--model", default=None, help="the served model's name (default: the first /v1/models lists)")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=1000)
    run_subcommand(parser)


if __name__ == "__main__":
    main()
