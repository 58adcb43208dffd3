"""What ``speculab bench --endpoint``'s client costs per streamed token, against a server that streams canned tokens.

A FastAPI app answers ``/v1/chat/completions`` with ``max_tokens`` one-token chunks and no model
behind it, in its own process (uvicorn on loopback). The benchmark client (``bench/over_http/endpoint.py``'s
``run_requests``, exactly as a cell runs it) keeps ``--streams`` requests in flight. Reported: the
client process's CPU time per streamed token (what the client adds; target < 1 ms at 64 streams),
and the wall time per token of the whole exchange. Medians of ``--repeats`` with the spread.

    .venv/bin/python benchmarks/client_overhead.py --streams 64 --requests 256 --tokens 64 --repeats 3

The last stdout line is one JSON document.
"""

import argparse
import asyncio
import json
import multiprocessing
import socket
import statistics
import time

import httpx
from fastapi import FastAPI, Request
from sse_starlette import EventSourceResponse


def canned_app() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "canned", "object": "model", "owned_by": "canned"}]}

    @app.get("/health")
    async def health():
        return {}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        n = int(body.get("max_tokens") or 16)

        async def chunks():
            for i in range(n):
                yield {
                    "data": json.dumps(
                        {
                            "id": "c",
                            "object": "chat.completion.chunk",
                            "created": 0,
                            "model": "canned",
                            "choices": [{"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": "length" if i == n - 1 else None}],
                        }
                    )
                }
            yield {
                "data": json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": "canned",
                        "choices": [],
                        "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
                    }
                )
            }
            yield {"data": "[DONE]"}

        return EventSourceResponse(chunks())

    return app


def serve(port: int) -> None:
    import uvicorn

    uvicorn.run(canned_app(), host="127.0.0.1", port=port, log_level="error")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_pass(url: str, streams: int, requests: int, tokens: int) -> dict:
    from speculab.bench.over_http.endpoint import Endpoint, EndpointInfo, run_requests
    from speculab.bench.workload import WorkloadItem

    endpoint = Endpoint(url)
    info = EndpointInfo("canned", "canned", None, "endpoint", "canned", None)
    items = [WorkloadItem(f"p{i}", "python", "refactor", (("user", "hi"),)) for i in range(requests)]
    bodies = [{"stream": True, "stream_options": {"include_usage": True}, "max_tokens": tokens}] * requests
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results, _, _ = asyncio.run(run_requests(endpoint, info, items, streams, bodies, 120.0, None))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    got = sum(r.output_tokens for r in results)
    if got != requests * tokens or not all(r.ok for r in results):
        raise RuntimeError(f"expected {requests * tokens} tokens, got {got}; errors: {[r.error for r in results if r.error][:3]}")
    return {"client_cpu_ms_per_token": 1000 * cpu / got, "wall_ms_per_token": 1000 * wall / got, "tokens": got}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=serve, args=(port,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        one_pass(url, args.streams, min(args.requests, args.streams), 8)  # warm-up
        passes = [one_pass(url, args.streams, args.requests, args.tokens) for _ in range(args.repeats)]
    finally:
        server.terminate()
    summary = {"streams": args.streams, "requests": args.requests, "tokens_per_request": args.tokens, "repeats": args.repeats}
    for key in ("client_cpu_ms_per_token", "wall_ms_per_token"):
        values = sorted(p[key] for p in passes)
        summary[key] = {"median": statistics.median(values), "min": values[0], "max": values[-1]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
