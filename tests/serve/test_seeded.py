"""A seeded request's text under `speculab serve --method eagle`: the same alone and beside 15 other requests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.servers import MODEL

pytestmark = pytest.mark.slow

PROMPT = "def fibonacci(n):"


def complete(url: str, **fields) -> dict:
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 24, "temperature": 0.8, "ignore_eos": True, **fields}
    answer = httpx.post(f"{url}/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_seeded_request_reads_the_same_alone_and_under_load(eagle_server):
    url = eagle_server.v1
    alone = complete(url, seed=7)
    assert alone["sampling"] == {"sampling_verify": "coupled", "seed": 7}
    others = [dict(seed=100 + i) for i in range(7)] + [dict(temperature=1.0 + i / 10) for i in range(4)] + [dict(temperature=0)] * 4
    with ThreadPoolExecutor(16) as pool:
        loaded = [pool.submit(complete, url, seed=7)] + [pool.submit(complete, url, **fields) for fields in others]
        texts = [f.result()["choices"][0]["text"] for f in loaded]
    assert texts[0] == alone["choices"][0]["text"]
    assert httpx.get(f"{eagle_server.url}/version", timeout=30).json()["sampling_verify"] == "auto"


def test_an_unseeded_coupled_request_says_its_seed_and_that_seed_gives_its_text(eagle_server):
    url = eagle_server.v1
    first = complete(url, sampling_verify="coupled")
    again = complete(url, seed=first["sampling"]["seed"])
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    assert "sampling" not in complete(url, seed=7, sampling_verify="rejection")  # rejection sampling: one stream
    refused = httpx.post(f"{url}/completions", json={"model": MODEL, "prompt": PROMPT, "sampling_verify": "gumbel"}, timeout=60)
    assert refused.status_code == 400 and "sampling_verify" in refused.text
