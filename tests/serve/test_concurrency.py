"""Continuous batching under load: 64 streams, a client that leaves, a full queue, the API key."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from httpx_sse import aconnect_sse

from tests.servers import MODEL

pytestmark = pytest.mark.slow

KEY = {"Authorization": "Bearer sekret"}


async def stream_tokens(client: httpx.AsyncClient, url: str, max_tokens: int, prompt: str) -> tuple[int, str]:
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    usage, text = None, ""
    async with aconnect_sse(client, "POST", f"{url}/completions", json=body) as source:
        assert source.response.status_code == 200
        async for event in source.aiter_sse():
            if event.data == "[DONE]":
                break
            data = json.loads(event.data)
            text += "".join(c["text"] for c in data["choices"])
            usage = data.get("usage") or usage
    return usage["completion_tokens"], text


def test_64_concurrent_streams_complete(eagle_server):
    async def main():
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=80)) as client:
            jobs = [stream_tokens(client, eagle_server.v1, 6 + i % 5, f"# task {i}\ndef f{i}(x):") for i in range(64)]
            return await asyncio.wait_for(asyncio.gather(*jobs), timeout=600)

    results = asyncio.run(main())
    assert [n for n, _ in results] == [6 + i % 5 for i in range(64)]
    assert all(text for _, text in results)
    running = httpx.get(f"{eagle_server.url}/metrics", timeout=30).text
    assert 'vllm:num_requests_running{engine="0",model_name="SmolLM2-135M-Instruct"} 0.0' in running


def long_stream(url: str, client: httpx.Client):
    body = {"model": MODEL, "prompt": "Count: 1, 2, 3,", "max_tokens": 3000, "ignore_eos": True, "stream": True, "temperature": 0}
    return client.stream("POST", f"{url}/completions", json=body, headers=KEY)


def quick(url: str) -> httpx.Response:
    return httpx.post(
        f"{url}/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2, "ignore_eos": True}, headers=KEY, timeout=60
    )


def test_full_queue_answers_429_then_a_leaving_client_frees_its_slot(one_slot_server):
    url = one_slot_server.v1
    with httpx.Client(timeout=60) as client, long_stream(url, client) as held:
        assert held.status_code == 200
        lines = held.iter_lines()
        assert any(line.startswith("data:") for line in lines)  # it is decoding in the only slot
        refused = quick(url)
        assert refused.status_code == 429 and "full" in refused.json()["error"]["message"]
    # the client closed its stream mid-way: the slot is free again (bounded wait for the engine's next step)
    deadline = time.monotonic() + 30
    while (answer := quick(url)).status_code == 429 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2
    metrics = httpx.get(f"{one_slot_server.url}/metrics", timeout=30).text
    assert 'finished_reason="abort"' in metrics


def test_api_key_is_required_on_v1(one_slot_server):
    plain = httpx.post(f"{one_slot_server.v1}/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1}, timeout=30)
    assert plain.status_code == 401 and "API key" in plain.json()["error"]["message"]
    wrong = httpx.get(f"{one_slot_server.v1}/models", headers={"Authorization": "Bearer nope"}, timeout=30)
    assert wrong.status_code == 401
    assert httpx.get(f"{one_slot_server.v1}/models", headers=KEY, timeout=30).status_code == 200
    assert httpx.get(f"{one_slot_server.url}/health", timeout=30).status_code == 200  # health and metrics stay open, as in vLLM
