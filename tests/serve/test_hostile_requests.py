"""Requests that once stopped or poisoned the server: each fails alone (a 4xx where the input is at fault), requests
batched with it go on, no secret leaves the process, and a client that leaves frees its slot, streaming or not."""

from __future__ import annotations

import concurrent.futures
import socket
import time

import httpx
import pytest

from tests.servers import MODEL

pytestmark = pytest.mark.slow

KEY = {"Authorization": "Bearer sekret"}  # one_slot_server's key


def complete(url: str, timeout: float = 120, **fields) -> httpx.Response:
    return httpx.post(f"{url}/completions", json={"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 4, **fields}, timeout=timeout)


# Numbers at the edges of what the engine can honour: each is answered 200 with tokens.
EXTREME_BUT_VALID = [
    {"temperature": 1e-45},
    {"temperature": 5e-324},
    {"temperature": 1e300},
    {"top_p": 1e-300},
    {"top_p": 1e-300, "temperature": 1e-45, "top_k": 1},
    {"top_k": 10**30},
    {"seed": 2**64 - 1, "temperature": 1.0},
    {"seed": -(2**63), "temperature": 1.0},
    {"presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "response_format": {"type": "text"}},  # neutral values
]
# Out of range or unsupported: 400 naming the field.
REFUSED = [
    ({"seed": 2**64}, "seed"),
    ({"seed": -(2**63) - 1}, "seed"),
    ({"stop": ["x" * 513]}, "stop"),
    ({"stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"logit_bias": {"5": 10}}, "logit_bias"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"frequency_penalty": 1}, "frequency_penalty"),
    ({"repetition_penalty": 1.2}, "repetition_penalty"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"min_p": 0.1}, "min_p"),
    ({"guided_regex": "a+"}, "guided_regex"),
]


def test_extreme_requests_fail_alone_and_batched_requests_go_on(eagle_server):
    url = eagle_server.v1
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        long = pool.submit(complete, url, max_tokens=48, ignore_eos=True, temperature=0.7, seed=3)
        time.sleep(0.5)  # the long request is decoding when the others arrive
        valid = [pool.submit(complete, url, **fields) for fields in EXTREME_BUT_VALID]
        refused = [pool.submit(complete, url, **fields) for fields, _ in REFUSED]
        for fields, answer in zip(EXTREME_BUT_VALID, valid):
            got = answer.result()
            assert got.status_code == 200, (fields, got.text)
            assert got.json()["usage"]["completion_tokens"] >= 1 or got.json()["choices"][0]["finish_reason"] == "stop"
        for (fields, param), answer in zip(REFUSED, refused):
            got = answer.result()
            assert got.status_code == 400, (fields, got.text)
            assert got.json()["error"]["param"] == param or param in got.json()["error"]["message"], got.text
        finished = long.result()
    assert finished.status_code == 200 and finished.json()["usage"]["completion_tokens"] == 48
    assert finished.json()["choices"][0]["finish_reason"] == "length"
    assert complete(url).status_code == 200  # the engine loop is alive


def test_stop_token_ids_end_the_output_as_vllm_does(eagle_server):
    from speculab.models.embedded import ensure_embedded_model
    from speculab.models.tokenizer import Tokenizer

    url = eagle_server.v1
    plain = complete(url, temperature=0, max_tokens=6).json()["choices"][0]["text"]
    second = Tokenizer(ensure_embedded_model()).encode(plain, add_bos=False)[1]  # the second token generated
    cut = complete(url, temperature=0, max_tokens=6, stop_token_ids=[second]).json()
    assert cut["choices"][0]["finish_reason"] == "stop" and cut["usage"]["completion_tokens"] <= 1
    assert plain.startswith(cut["choices"][0]["text"])


def test_a_body_over_the_limit_is_answered_413(eagle_server):
    big = b'{"model": "' + b"x" * (5 * 1024 * 1024) + b'", "prompt": "x"}'
    declared = httpx.post(f"{eagle_server.v1}/completions", content=big, headers={"content-type": "application/json"}, timeout=60)
    assert declared.status_code == 413 and "limit" in declared.json()["error"]["message"]

    def chunks():  # no Content-Length: the bytes sent are counted
        for _ in range(6):
            yield b"x" * (1024 * 1024)

    chunked = httpx.post(f"{eagle_server.v1}/completions", content=chunks(), headers={"content-type": "application/json"}, timeout=60)
    assert chunked.status_code == 413
    assert complete(eagle_server.v1).status_code == 200


def test_the_api_key_never_leaves_the_server(one_slot_server):
    root = one_slot_server.url
    version = httpx.get(f"{root}/version", timeout=30)
    assert version.status_code == 200 and "--api-key" in version.json()["command"]
    seen = [version.text, httpx.get(f"{root}/metrics", timeout=30).text, httpx.get(f"{root}/v1/models", headers=KEY, timeout=30).text]
    seen.append(httpx.post(f"{root}/v1/completions", json={"model": MODEL, "prompt": "x"}, timeout=30).text)  # 401
    seen.append(open(one_slot_server.log).read())
    assert not any("sekret" in text for text in seen)


def test_the_server_says_its_kv_cache_dtype(one_slot_server):
    """This server keeps its KV cache in bf16 (--kv-dtype bfloat16) under fp32 activations, and says both."""
    version = httpx.get(f"{one_slot_server.url}/version", timeout=30).json()
    assert (version["dtype"], version["kv_dtype"]) == ("float32", "bfloat16")
    model = httpx.get(f"{one_slot_server.v1}/models", headers=KEY, timeout=30).json()["data"][0]
    assert model["speculab"]["kv_dtype"] == "bfloat16"


def test_a_non_streaming_client_that_leaves_frees_its_slot(one_slot_server):
    """A non-streaming request asked for 3,000 tokens in the only slot; its client goes after a second. The slot must
    be free long before the request would have finished (3,000 tokens take minutes here)."""
    body = b'{"model": "%s", "prompt": "def f(x):", "max_tokens": 3000, "ignore_eos": true, "temperature": 0}' % MODEL.encode()
    port = int(one_slot_server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sekret\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        deadline = time.monotonic() + 60
        while running(one_slot_server) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running(one_slot_server) == 1  # it holds the only slot
        time.sleep(1.0)
    left = time.monotonic()
    while running(one_slot_server) and time.monotonic() - left < 20:
        time.sleep(0.05)
    assert running(one_slot_server) == 0, "the slot was still held 20 s after the client left"
    ok = httpx.post(f"{one_slot_server.v1}/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2}, headers=KEY, timeout=60)
    assert ok.status_code == 200


def running(server) -> float:
    for line in httpx.get(f"{server.url}/metrics", timeout=30).text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:num_requests_running gauge")
