"""What serving over HTTP costs: ``speculab serve`` + the ``bench --endpoint`` client against the in-process engine.

For each batch size, passes alternate in-process / HTTP (ABBA order, so a drift in this shared machine's
speed cancels out), on the same workload prompts, with no prompt cache on either side (every request pays its
prefill, as a server's does). A pass sends every prompt once with ``batch size`` requests in flight; tok/s
is output tokens over the pass's wall time. Reported per batch size: each side's median tok/s and the
HTTP / in-process ratio per pair (median, min, max). Greedy fp32 outputs are checked equal on both sides.

    .venv/bin/python benchmarks/serving_overhead.py --method eagle --batch-sizes 1 8 --pairs 4

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

import httpx

from speculab import runtime
from speculab.bench.in_process import Target, run_once
from speculab.bench.over_http.endpoint import Endpoint, cell_figures, probe_all, run_requests
from speculab.bench.workload import interleave_domains, load_workload
from speculab.cpu import reported_cpu_flags
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.sampling import SamplingParams
from speculab.testbed import cpu_name


def start_server(method: str, port: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "speculab.cli",
            "serve",
            "--method",
            method,
            "--port",
            str(port),
            "--max-model-len",
            "2048",
            "--max-batch",
            "16",
        ],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("speculab serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="eagle")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--num-prompts", type=int, nargs="+", default=[4, 8], help="prompts per pass, one per batch size")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--port", type=int, default=8399)
    args = parser.parse_args()
    spec = parse_method(args.method)
    loaded = runtime.load()
    options = proposer_options(spec, loaded)
    server = start_server(args.method, args.port)
    endpoint = Endpoint(f"http://127.0.0.1:{args.port}")
    try:
        info = probe_all([endpoint])[endpoint]
        out = {
            "method": spec.label,
            "dtype": loaded.dtype,
            "cpu": cpu_name(),
            "cpu_flags": reported_cpu_flags(),
            "max_tokens": args.max_tokens,
            "cells": {},
        }
        for batch, n in zip(args.batch_sizes, args.num_prompts):
            items = interleave_domains(load_workload(), n)
            prompts = [loaded.tokenizer.encode_chat(i.message_dicts()) for i in items]
            target = Target(loaded, prompts, items, None)
            params = [SamplingParams(max_tokens=args.max_tokens, seed=i) for i in range(n)]
            bodies = [
                {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": args.max_tokens, "temperature": 0, "seed": i}
                for i in range(n)
            ]

            def local():
                requests, wall = run_once(target, new_proposer(spec, options), batch, params, None)
                return sum(len(r.output_ids) for r in requests) / wall, [loaded.tokenizer.decode(r.output_ids) for r in requests]

            def http():
                results, wall, delta = asyncio.run(run_requests(endpoint, info, items, batch, bodies, 600.0, None))
                return cell_figures(results, wall, delta)["output_throughput"], [r.text for r in results]

            local()  # warm-up, both sides
            http()
            pairs, same = [], True
            for i in range(args.pairs):
                order = (local, http) if i % 2 == 0 else (http, local)
                got = {f.__name__: f() for f in order}
                pairs.append((got["local"][0], got["http"][0]))
                same &= got["local"][1] == got["http"][1]
            ratios = sorted(remote / here for here, remote in pairs)
            out["cells"][batch] = {
                "prompts": n,
                "in_process_tok_s": statistics.median(p[0] for p in pairs),
                "http_tok_s": statistics.median(p[1] for p in pairs),
                "ratio_median": statistics.median(ratios),
                "ratio_min": ratios[0],
                "ratio_max": ratios[-1],
                "pairs": [[round(a, 3), round(b, 3)] for a, b in pairs],
                "greedy_identical": same,
            }
            print(json.dumps({batch: out["cells"][batch]}), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
