"""A long prompt arriving while streams run: the running streams' gaps and the arrival's time to first token, under
each way of chunking its prefill (``Engine(chunked_prefill=…)``: a token budget, the server's
``--max-num-batched-tokens N``, or chunks paced to the decode, the server's default; "whole": the whole prompt's prefill
inside one step, as before chunked prefill, ``--max-num-batched-tokens 0``).

Subcommands (``--help`` on each says more):
- ``in-process``: one engine runs ``--streams`` requests (the workload's first prompts, decoding for as long as the run
  lasts); for each way in turn, round after round (so the machine's drift and the streams' growing contexts reach
  every way alike): the streams' gaps over ``--alone-steps`` steps with nothing arriving, then one prompt of
  ``--arrival-tokens`` tokens (a workload request after repository files, as ``speculab bench --contexts`` lengthens
  it; cold: no prompt cache) arrives, and the streams' gaps until its first token (and the step after it) are its own;
  the arrival then leaves. On the engine's own clock, gaps as a server's inter-token latency counts them.
- ``http``: the same over HTTP, the official ``openai`` client against ``speculab serve`` on loopback: for each way one
  server, its streams started once and kept running, then a round per arrival (``--alone-seconds`` alone, the
  arrival's first content, two seconds more); the gaps between content chunks as the client sees them. The ways run one
  after another, each round's ratio within its own server.
Knows: those two clocks, servers it starts itself on 127.0.0.1. Does not know: the study's cells (``speculab bench``).
Usage: python benchmarks/arrivals.py COMMAND [options]. The last stdout line is one JSON document.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time

from common import command_line, run_record, run_subcommand, spread, subcommand
from openai import OpenAI
from serving import free_port, wait_healthy

from speculab import runtime
from speculab.bench.contexts import Lengthener
from speculab.bench.latency import percentile
from speculab.bench.workload import interleave_domains, load_workload
from speculab.chunked_prefill import PacedChunks, StepShare, TokenBudget
from speculab.engine import Engine, sequence_length
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.models.embedded import ensure_embedded_model
from speculab.models.tokenizer import Tokenizer
from speculab.sampling import SamplingParams

POSITIONS = 8192  # the embedded model's: a server's --max-model-len
WAYS = {"in-process": ["whole", "16", "32", "64", "paced"], "http": ["whole", "paced"]}


def gaps(requests, since: float, until: float, whole: bool) -> list[float]:
    """Each stream's gaps between two steps that gave it tokens, the later one after ``since`` and by ``until``;
    ``whole``: the earlier one after ``since`` too."""
    found = []
    for r in requests:
        times = sorted(set(r.token_times))
        found += [b - a for a, b in zip(times, times[1:]) if since < b <= until and (since < a or not whole)]
    return found


def next_tokens(requests, after: float) -> float:
    """When every stream had its first token after ``after``: the gap that held the arrival's last chunk ends there."""
    return max(min(t for t in r.token_times if t > after) for r in requests)


def chunking(name: str) -> StepShare | None:
    """A ``--budgets`` value as the engine takes it: "whole" (None), "paced" or a number of tokens."""
    return None if name == "whole" else PacedChunks() if name == "paced" else TokenBudget(int(name))


def one_round(engine: Engine, streams, arrival_ids: list[int], way: str, alone_steps: int) -> dict:
    """The streams' gaps alone, then with one arrival chunked ``way``; the arrival's time to first token."""
    engine.chunked_prefill = chunking(way)
    began = engine.clock()
    for _ in range(alone_steps):
        engine.step()
    alone = gaps(streams, began, engine.clock(), whole=True)
    arrival = engine.add_request(arrival_ids, SamplingParams(max_tokens=1, ignore_eos=True))
    arrived, steps = arrival.arrival_time, 0
    while not arrival.output_ids:
        engine.step()
        steps += 1
    first = arrival.token_times[0]
    for _ in range(2):  # the streams' next tokens, and the arrival leaves
        engine.step()
    during = gaps(streams, arrived, next_tokens(streams, first), whole=False)
    return {
        "alone_p50_ms": 1e3 * statistics.median(alone),
        "alone_p99_ms": 1e3 * percentile(alone, 0.99),
        "with_p50_ms": 1e3 * statistics.median(during),
        "with_p99_ms": 1e3 * percentile(during, 0.99),
        "with_max_ms": 1e3 * max(during),
        "ttft_s": first - arrived,
        "steps": steps,
    }


def summary(rounds: list[dict]) -> dict:
    """Each figure's median [min–max] over the rounds, and the p99 with the arrival over the p99 without, a round each."""
    keys = rounds[0].keys()
    out = {k: spread([r[k] for r in rounds], 3) for k in keys}
    out["p99_over_alone_p99"] = spread([r["with_p99_ms"] / r["alone_p99_ms"] for r in rounds], 2)
    return out


def in_process(args) -> None:
    """One engine, its streams and an arrival a round under each way, on the engine's own clock."""
    for way in args.budgets:
        chunking(way)  # a bad value fails before the model loads
    loaded = runtime.load(None, None)
    spec = parse_method(args.method)
    proposer = new_proposer(spec, proposer_options(spec, loaded))
    items = interleave_domains(load_workload(None), args.streams + args.rounds * len(args.budgets))
    prompts = [loaded.tokenizer.encode_chat(i.message_dicts()) for i in items]
    lengthen = Lengthener.from_pool(loaded.tokenizer)
    arrivals = [loaded.tokenizer.encode_chat(lengthen.at(i, args.arrival_tokens).message_dicts()) for i in items[args.streams :]]
    positions = loaded.model.config.max_position_embeddings
    # the streams decode for as long as the target's positions allow: past every round
    params = SamplingParams(max_tokens=positions - sequence_length(max(map(len, prompts[: args.streams])), 1, proposer), ignore_eos=True)
    engine = Engine(loaded.model, args.streams + 1, positions, loaded.tokenizer.stop_ids, proposer)
    streams = [engine.add_request(p, params) for p in prompts[: args.streams]]
    while not all(s.output_ids for s in streams):
        engine.step()
    started, by_budget = time.perf_counter(), {b: [] for b in args.budgets}
    for n in range(args.rounds):
        for k, budget in enumerate(args.budgets):
            ids = arrivals[n * len(args.budgets) + k]
            by_budget[budget].append(one_round(engine, streams, ids, budget, args.alone_steps))
            print(f"round {n + 1} {budget}: {json.dumps(by_budget[budget][-1])}", flush=True)
    result = {
        **run_record(),
        "method": spec.label,
        "arrival_tokens": [len(a) for a in arrivals],
        "seconds": round(time.perf_counter() - started, 1),
        "budgets": {b: summary(r) for b, r in by_budget.items()},
    }
    print(json.dumps(result))


def start_server(way: str, method: str, streams: int, port: int) -> subprocess.Popen:
    flags = [] if way == "paced" else ["--max-num-batched-tokens", "0" if way == "whole" else way]
    command = [sys.executable, "-m", "speculab.cli", "serve", "--method", method, "--port", str(port)]
    command += ["--max-model-len", str(POSITIONS), "--max-batch", str(streams + 1), *flags]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    if not wait_healthy(f"http://127.0.0.1:{port}", 180):
        process.kill()
        raise RuntimeError(f"speculab serve {' '.join(flags)} did not start")
    return process


def stream(client: OpenAI, model: str, messages: list[dict], max_tokens: int, times: list[float], stop: threading.Event) -> None:
    """One chat stream: the client's time of each chunk with content, until ``stop``."""
    response = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, stream=True, extra_body={"ignore_eos": True}
    )
    for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.perf_counter())
        if stop.is_set():
            response.close()
            return


def first_content(client: OpenAI, model: str, messages: list[dict]) -> float:
    """Seconds from sending ``messages`` to the first content of its stream."""
    sent = time.perf_counter()
    response = client.chat.completions.create(model=model, messages=messages, max_tokens=2, temperature=0, stream=True)
    for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            response.close()
            return time.perf_counter() - sent
    raise RuntimeError("the arrival gave no content")


def client_gaps(times: list[list[float]], since: float, until: float) -> list[float]:
    return [b - a for t in times for a, b in zip(t, t[1:]) if since < b <= until]


def one_way(way: str, args, items, arrivals) -> list[dict]:
    """A server for ``way``, its streams, and a round per arrival: the streams' gaps alone and with it, its TTFT."""
    port = free_port()
    server = start_server(way, args.method, args.streams, port)
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
    model = client.models.list().data[0].id
    times, stop = [[] for _ in range(args.streams)], threading.Event()
    threads = [
        threading.Thread(target=stream, args=(client, model, item.message_dicts(), POSITIONS - 1600, t, stop))
        for item, t in zip(items, times)
    ]
    try:
        for thread in threads:
            thread.start()
        while not all(len(t) > 5 for t in times):
            time.sleep(0.2)
        rounds = []
        for arrival in arrivals:
            began = time.perf_counter()
            time.sleep(args.alone_seconds)
            arrived = time.perf_counter()
            ttft = first_content(client, model, arrival.message_dicts())
            time.sleep(2)  # the streams' next chunks: the gap that held the last chunk ends in them
            alone, during = client_gaps(times, began, arrived), client_gaps(times, arrived, arrived + ttft + 2)
            rounds.append({"alone_p99_ms": 1e3 * percentile(alone, 0.99), "with_p99_ms": 1e3 * percentile(during, 0.99), "ttft_s": ttft})
            rounds[-1]["p99_over_alone_p99"] = rounds[-1]["with_p99_ms"] / rounds[-1]["alone_p99_ms"]
            print(f"{way}: {json.dumps(rounds[-1])}", flush=True)
        return rounds
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=30)


def http(args) -> None:
    """A ``speculab serve`` for each way, its streams and an arrival a round, on the ``openai`` client's clock."""
    for way in args.budgets:
        chunking(way)
    items = interleave_domains(load_workload(None), args.streams + args.rounds)
    lengthen = Lengthener.from_pool(Tokenizer(ensure_embedded_model()))
    arrivals = [lengthen.at(item, args.arrival_tokens) for item in items[args.streams :]]
    started = time.perf_counter()
    by_way = {way: one_way(way, args, items[: args.streams], arrivals) for way in args.budgets}
    result = {
        **run_record(),
        "seconds": round(time.perf_counter() - started, 1),
        "ways": {way: {k: spread([r[k] for r in rounds], 3) for k in rounds[0]} for way, rounds in by_way.items()},
    }
    print(json.dumps(result))


def main() -> None:
    parser, commands = command_line(__doc__)
    for name, run in (("in-process", in_process), ("http", http)):
        p = subcommand(commands, name, run)
        p.add_argument("--method", default="eagle", help="the streams' method, as `speculab serve --method` takes it")
        p.add_argument("--streams", type=int, default=4)
        p.add_argument("--arrival-tokens", type=int, default=4096, help="the arriving prompt's tokens")
        p.add_argument("--budgets", nargs="+", default=WAYS[name], help="whole, paced or a number of tokens a step")
        p.add_argument("--rounds", type=int, default=3)
    commands.choices["in-process"].add_argument("--alone-steps", type=int, default=40, help="the streams' steps alone a round")
    commands.choices["http"].add_argument("--alone-seconds", type=float, default=8.0, help="the streams alone a round")
    run_subcommand(parser)


if __name__ == "__main__":
    main()
