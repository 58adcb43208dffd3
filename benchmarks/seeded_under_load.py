"""Seeded requests against a running OpenAI-compatible server: each one's text alone, then all of them at once.

Sends ``--requests`` workload prompts (the domains in turn) to ``/v1/chat/completions``, sampled at
``--temperature`` with seed ``--seed + i``: first one at a time, then all of them with ``--concurrency`` in flight, and
counts the requests whose two texts are identical. Against ``speculab serve`` (coupled sampling for seeded requests,
its default) every one should be; a server whose seeded text depends on what runs beside it (rejection sampling
under speculation, vLLM's and SGLang's) shows here by how much.

    speculab serve --method eagle --policy auto &
    .venv/bin/python benchmarks/seeded_under_load.py --url http://127.0.0.1:8000 --requests 64 --concurrency 16

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor

import httpx

from speculab.bench.workload import interleave_domains, load_workload


def texts(client: httpx.Client, bodies: list[dict], concurrency: int) -> list[str]:
    def one(body: dict) -> str:
        answer = client.post("/v1/chat/completions", json=body)
        answer.raise_for_status()
        return answer.json()["choices"][0]["message"]["content"]

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, bodies))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server's root (no /v1)")
    p.add_argument("--model", default=None, help="the served model's name (default: the first /v1/models lists)")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=1000)
    args = p.parse_args()
    with httpx.Client(base_url=args.url, timeout=600) as client:
        model = args.model or client.get("/v1/models").json()["data"][0]["id"]
        items = interleave_domains(load_workload(), args.requests)
        bodies = [
            {"model": model, "messages": item.message_dicts(), "max_tokens": args.max_tokens, "temperature": args.temperature,
             "seed": args.seed + i}
            for i, item in enumerate(items)
        ]  # fmt: skip
        alone = texts(client, bodies, 1)
        together = texts(client, bodies, args.concurrency)
        version = client.get("/version").json() if client.get("/version").status_code == 200 else None
    same = sum(a == b for a, b in zip(alone, together))
    print(f"{same} of {len(bodies)} seeded requests read the same alone and {args.concurrency} at a time")
    record = {"requests": len(bodies), "identical": same, "concurrency": args.concurrency, "temperature": args.temperature}
    print(json.dumps(record | {"max_tokens": args.max_tokens, "model": model, "server": version}))


if __name__ == "__main__":
    main()
