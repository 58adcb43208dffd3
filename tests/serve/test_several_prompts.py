"""A completion request with a list of prompts: one choice each, as with one prompt per request, streamed or not."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.servers import MODEL

pytestmark = pytest.mark.slow

openai = pytest.importorskip("openai")

PROMPTS = ["def add(a, b):", "SELECT name FROM", "function greet(name) {"]


def one(url: str, prompt: str) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0}
    return httpx.post(f"{url}/completions", json=body, timeout=120).json()


def test_each_prompt_gets_the_choice_it_gets_alone(eagle_server):
    url = eagle_server.v1
    alone = [one(url, p) for p in PROMPTS]
    client = openai.OpenAI(base_url=url, api_key="unused", timeout=120, max_retries=0)
    reply = client.completions.create(model=MODEL, prompt=PROMPTS, max_tokens=8, temperature=0)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert [c.text for c in reply.choices] == [a["choices"][0]["text"] for a in alone]
    assert reply.usage.completion_tokens == sum(a["usage"]["completion_tokens"] for a in alone)
    assert reply.usage.prompt_tokens == sum(a["usage"]["prompt_tokens"] for a in alone)
    body = {"model": MODEL, "prompt": PROMPTS, "max_tokens": 8, "temperature": 0, "stream": True}
    raw = httpx.post(f"{url}/completions", json=body | {"stream_options": {"include_usage": True}}, timeout=120).text
    chunks = [json.loads(e[len("data: ") :]) for e in raw.split("\n\n") if e.startswith("data: {")]
    texts = ["", "", ""]
    for c in chunks:
        for ch in c["choices"]:
            texts[ch["index"]] += ch["text"]
    assert texts == [a["choices"][0]["text"] for a in alone] and raw.endswith("data: [DONE]\n\n")
    assert [c for c in chunks if "usage" in c and c["usage"]][-1]["usage"]["completion_tokens"] == reply.usage.completion_tokens
    assert sum(1 for c in chunks for ch in c["choices"] if ch["finish_reason"]) == 3


def test_too_many_prompts_are_refused_naming_the_field(eagle_server):
    body = {"model": MODEL, "prompt": ["x"] * 65, "max_tokens": 2}
    answer = httpx.post(f"{eagle_server.v1}/completions", json=body, timeout=60)
    assert answer.status_code == 400 and "prompt" in answer.text
