"""Every malformed request gets a clear 4xx naming the problem, and the server keeps serving."""

from __future__ import annotations

import httpx
import pytest

from tests.servers import MODEL

pytestmark = pytest.mark.slow

CHAT, COMPLETIONS = "/chat/completions", "/completions"
MSG = [{"role": "user", "content": "hi"}]

# (route, raw body or JSON, status, words the message must contain)
CASES = [
    (COMPLETIONS, b"{not json", 400, "malformed JSON"),
    (CHAT, b"[1, 2", 400, "malformed JSON"),
    (COMPLETIONS, {"prompt": "x"}, 400, "model"),
    (COMPLETIONS, {"model": MODEL}, 400, "prompt"),
    (COMPLETIONS, {"model": MODEL, "prompt": 5}, 400, "prompt"),
    (COMPLETIONS, {"model": MODEL, "prompt": ""}, 400, "prompt"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "max_tokens": -3}, 400, "max_tokens"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "temperature": -0.5}, 400, "temperature"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "top_p": 0}, 400, "top_p"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "top_p": 1.5}, 400, "top_p"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "n": 2}, 400, "n > 1"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "logprobs": 21}, 400, "logprobs"),
    (CHAT, {"model": MODEL, "messages": MSG, "top_logprobs": 2}, 400, "top_logprobs needs logprobs"),
    (CHAT, {"model": MODEL, "messages": MSG, "logprobs": True, "top_logprobs": 30}, 400, "top_logprobs"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "echo": True}, 400, "echo"),
    (COMPLETIONS, {"model": MODEL, "prompt": [10, 99999999]}, 400, "token ids"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "stop": [""]}, 400, "stop"),
    (COMPLETIONS, {"model": MODEL, "prompt": "x", "stream": "maybe"}, 400, "stream"),
    (COMPLETIONS, {"model": MODEL, "prompt": "word " * 1100}, 400, "context"),
    (COMPLETIONS, {"model": "gpt-5", "prompt": "x"}, 404, "does not exist"),
    (CHAT, {"model": "gpt-5", "messages": MSG}, 404, "does not exist"),
    (CHAT, {"model": MODEL}, 400, "messages"),
    (CHAT, {"model": MODEL, "messages": []}, 400, "messages must not be empty"),
    (CHAT, {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "unknown role"),
    (CHAT, {"model": MODEL, "messages": [{"content": "hi"}]}, 400, "role"),
    (CHAT, {"model": MODEL, "messages": "hi"}, 400, "messages"),
    (CHAT, {"model": MODEL, "messages": MSG, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    (CHAT, {"model": MODEL, "messages": MSG, "n": 3}, 400, "n > 1"),
    (CHAT, {"model": MODEL, "messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
]


def test_at_least_twenty_distinct_cases():
    assert len({repr(c[:2]) for c in CASES}) >= 20


@pytest.mark.parametrize("route,body,status,words", CASES, ids=[f"{i}-{c[3]}" for i, c in enumerate(CASES)])
def test_bad_request_is_refused_clearly(eagle_server, route, body, status, words):
    url = f"{eagle_server.v1}{route}"
    sent = (
        httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30)
        if isinstance(body, bytes)
        else httpx.post(url, json=body, timeout=30)
    )
    assert sent.status_code == status, sent.text
    error = sent.json()["error"]
    assert words.lower() in error["message"].lower(), error
    assert error["code"] == status


def test_server_still_serves_after_bad_requests(eagle_server):
    for route, body, _, _ in CASES:
        httpx.post(f"{eagle_server.v1}{route}", json=body if not isinstance(body, bytes) else None, timeout=30)
    ok = httpx.post(
        f"{eagle_server.v1}/completions", json={"model": MODEL, "prompt": "x = ", "max_tokens": 3, "temperature": 0}, timeout=60
    )
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1
