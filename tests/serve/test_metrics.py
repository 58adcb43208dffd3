"""/metrics through prometheus_client's parser: vLLM's names, and counters equal to the per-response stats."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import MODEL

pytestmark = pytest.mark.slow

PROMPTS = ["def merge(a, b):\n", "interface User {\n", "SELECT name FROM", "class Stack:\n"]


def scrape(url: str) -> dict[str, float]:
    """Sample name (with its position label, if any) -> value, summed over other labels."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=30).text):
        for s in family.samples:
            key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
            values[key] = values.get(key, 0.0) + s.value
    return values


def test_vllm_metric_names_are_exposed(eagle_server):
    names = set(scrape(eagle_server.url))
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
    ):
        assert name in names, name


def test_counters_equal_the_per_response_stats(eagle_server):
    before = scrape(eagle_server.url)
    totals = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "generated": 0, "prompt": 0, "per_pos": {}}
    for prompt in PROMPTS:
        body = httpx.post(
            f"{eagle_server.v1}/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0}, timeout=120
        ).json()
        spec = body["metrics"]["speculative_decoding"]
        totals["drafts"] += spec["num_drafts"]
        totals["draft_tokens"] += spec["num_draft_tokens"]
        totals["accepted"] += spec["num_accepted_draft_tokens"]
        totals["generated"] += body["usage"]["completion_tokens"]
        totals["prompt"] += body["usage"]["prompt_tokens"]
        for pos, n in enumerate(spec["num_accepted_tokens_per_pos"]):
            totals["per_pos"][pos] = totals["per_pos"].get(pos, 0) + n
    after = scrape(eagle_server.url)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert totals["accepted"] > 0
    assert delta("vllm:spec_decode_num_drafts_total") == totals["drafts"]
    assert delta("vllm:spec_decode_num_draft_tokens_total") == totals["draft_tokens"]
    assert delta("vllm:spec_decode_num_accepted_tokens_total") == totals["accepted"]
    assert delta("vllm:generation_tokens_total") == totals["generated"]
    assert delta("vllm:prompt_tokens_total") == totals["prompt"]
    for pos, n in totals["per_pos"].items():
        assert delta(f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{pos}]") == n
    assert delta("vllm:request_success_total") == len(PROMPTS)
    assert delta("vllm:e2e_request_latency_seconds_count") == len(PROMPTS)
    assert after["vllm:num_requests_running"] == 0


def test_an_agents_next_turn_hits_the_prefix_cache_and_the_counters_say_how_much(eagle_server):
    # the next turn resends the conversation so far: its prompt extends the first one's, whose prefill the server kept
    before = scrape(eagle_server.url)
    first = [{"role": "user", "content": "Write a Python function that reverses a linked list."}]

    def chat(messages):
        body = {"model": MODEL, "messages": messages, "max_tokens": 24, "temperature": 0}
        return httpx.post(f"{eagle_server.v1}/chat/completions", json=body, timeout=120).json()

    one = chat(first)
    answer = {"role": "assistant", "content": one["choices"][0]["message"]["content"]}
    two = chat([*first, answer, {"role": "user", "content": "Now make it iterative."}])
    after = scrape(eagle_server.url)
    prompts = one["usage"]["prompt_tokens"], two["usage"]["prompt_tokens"]
    queried = after["vllm:prefix_cache_queries_total"] - before.get("vllm:prefix_cache_queries_total", 0.0)
    hit = after["vllm:prefix_cache_hits_total"] - before.get("vllm:prefix_cache_hits_total", 0.0)
    assert queried == sum(prompts)
    assert prompts[0] <= hit < sum(prompts)  # the second took at least the whole first prompt from the cache
    cached = one["usage"]["prompt_tokens_details"]["cached_tokens"], two["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert sum(cached) == hit and cached[1] >= prompts[0]  # each answer says what it took, as OpenAI's usage does
    assert 0 < after["speculab:prefix_cache_bytes"] <= 2 * 2**30  # within the default --prefix-cache-gib
