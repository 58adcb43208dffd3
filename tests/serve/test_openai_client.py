"""The official `openai` client against `speculab serve` (EAGLE, fp32): text equals in-process greedy decoding."""

from __future__ import annotations

import pytest

from speculab.engine import Engine
from speculab.runtime import load
from speculab.sampling import SamplingParams
from tests.servers import MODEL

pytestmark = pytest.mark.slow

openai = pytest.importorskip("openai")

QUESTION = "Write a Python function that checks whether a string is a palindrome."
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def in_process():
    """Plain greedy decoding in this process: what every speculative server response must equal (fp32)."""
    loaded = load(dtype="float32")

    def generate(prompt_ids: list[int]) -> str:
        engine = Engine(loaded.model, 1, len(prompt_ids) + MAX_TOKENS + 8, loaded.tokenizer.stop_ids)
        (request,) = engine.generate([prompt_ids], SamplingParams(max_tokens=MAX_TOKENS))
        return loaded.tokenizer.decode(request.output_ids), len(request.output_ids)

    return loaded.tokenizer, generate


@pytest.fixture(scope="module")
def client(eagle_server):
    return openai.OpenAI(base_url=eagle_server.v1, api_key="unused", timeout=120, max_retries=0)


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_chat_equals_in_process_greedy(client, in_process):
    tokenizer, generate = in_process
    expected, n = generate(tokenizer.encode_chat([{"role": "user", "content": QUESTION}]))
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=MAX_TOKENS, temperature=0
    )
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage.completion_tokens == n and reply.choices[0].finish_reason in ("stop", "length")
    spec = reply.model_extra["metrics"]["speculative_decoding"]
    assert spec["num_draft_tokens"] > 0 and spec["num_accepted_draft_tokens"] > 0  # the EAGLE head drafted and was right


def test_chat_stream_equals_in_process_greedy(client, in_process):
    tokenizer, generate = in_process
    expected, n = generate(tokenizer.encode_chat([{"role": "user", "content": QUESTION}]))
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert chunks[-1].usage.completion_tokens == n and not chunks[-1].choices
    assert sum(1 for c in chunks if c.choices and c.choices[0].finish_reason) == 1


def test_completion_equals_in_process_greedy(client, in_process):
    tokenizer, generate = in_process
    prompt = "def quicksort(items):\n"
    expected, n = generate(tokenizer.encode(prompt))
    reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
    assert reply.choices[0].text == expected and reply.usage.completion_tokens == n
    stream = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == expected


def test_stop_string_cuts_the_text(client, in_process):
    tokenizer, generate = in_process
    prompt = "def quicksort(items):\n"
    full, _ = generate(tokenizer.encode(prompt))
    stop = full[10:14]
    cut = full[: full.index(stop)]
    for stream in (False, True):
        reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, stop=[stop], stream=stream)
        chunks = list(reply) if stream else [reply]
        assert "".join(c.choices[0].text for c in chunks if c.choices) == cut
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_sampled_requests_run_and_are_seeded(client):
    """The seed, the temperature and top_p are all honoured: one seed repeats itself, seeds differ from each other and
    from greedy, and a top_p that keeps only the most likely token is greedy again."""

    def ask(seed=7, temperature=1.0, top_p=1.0):
        reply = client.completions.create(model=MODEL, prompt="SELECT", max_tokens=12, temperature=temperature, top_p=top_p, seed=seed)
        return reply.choices[0].text

    assert ask() == ask()
    sampled = {ask(seed) for seed in range(6)}
    greedy = ask(temperature=0)
    assert len(sampled) > 1 and sampled != {greedy}
    assert ask(seed=3, top_p=1e-9) == greedy


def test_tokenize_and_detokenize_as_vllm_answers_them(eagle_server, in_process):
    """vLLM's /tokenize (a prompt: with the BOS; messages: the chat template's ids) and /detokenize, outside /v1."""
    import httpx

    tokenizer, _ = in_process
    post = lambda path, body: httpx.post(f"{eagle_server.url}{path}", json=body, timeout=60)  # noqa: E731
    said = post("/tokenize", {"model": MODEL, "prompt": QUESTION, "return_token_strs": True}).json()
    assert said["tokens"] == tokenizer.encode(QUESTION) and said["count"] == len(said["tokens"])
    assert said["max_model_len"] == 1024 and "".join(said["token_strs"]) == tokenizer.decode(said["tokens"], skip_special_tokens=False)
    bare = post("/tokenize", {"prompt": QUESTION, "add_special_tokens": False}).json()
    assert bare["tokens"] == tokenizer.encode(QUESTION, add_bos=False) and bare["token_strs"] is None
    messages = [{"role": "user", "content": QUESTION}]
    assert post("/tokenize", {"messages": messages}).json()["tokens"] == tokenizer.encode_chat(messages)
    assert post("/detokenize", {"model": MODEL, "tokens": bare["tokens"]}).json() == {"prompt": QUESTION}
    for path, body, field in [
        ("/tokenize", {"prompt": "x", "messages": messages}, "either prompt or messages"),
        ("/tokenize", {"model": "other", "prompt": "x"}, "does not exist"),
        ("/detokenize", {"tokens": [10**9]}, "tokens must be in"),
        ("/detokenize", {"tokens": [-1]}, "tokens"),
    ]:
        answer = post(path, body)
        assert answer.status_code in (400, 404, 422) and field in answer.text, answer.text


def test_stream_events_end_in_a_blank_line_of_newlines(eagle_server):
    """Events end in "\\n\\n", as vLLM's do: a client splitting on it (vLLM's benchmark) finds the usage event."""
    import httpx

    options = {"include_usage": True}  # ignore_eos: a sampled first token may be the end of text
    body = {"model": MODEL, "prompt": QUESTION, "max_tokens": 8, "stream": True, "ignore_eos": True, "stream_options": options}
    raw = httpx.post(f"{eagle_server.v1}/completions", json=body, timeout=120).content.decode()
    assert "\r" not in raw and raw.endswith("data: [DONE]\n\n")
    events = [e for e in raw.split("\n\n") if e.startswith("data: {")]
    assert '"usage"' in events[-1] and '"completion_tokens":8' in events[-1].replace(" ", "")


def test_continuous_usage_stats_put_the_usage_so_far_in_every_chunk(eagle_server):
    """vLLM's stream_options.continuous_usage_stats: each chunk carries the usage so far, never decreasing, ending at
    the last chunk's count; without it only the last (choice-less) chunk has one."""
    import json as json_

    import httpx

    body = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 12, "stream": True, "ignore_eos": True}
    for continuous in (True, False):
        options = {"include_usage": True, "continuous_usage_stats": continuous}
        raw = httpx.post(f"{eagle_server.v1}/chat/completions", json=body | {"stream_options": options}, timeout=120).text
        chunks = [json_.loads(e[len("data: ") :]) for e in raw.split("\n\n") if e.startswith("data: {")]
        with_usage = [c for c in chunks if "usage" in c]
        assert with_usage[-1]["choices"] == [] and with_usage[-1]["usage"]["completion_tokens"] == 12
        if continuous:
            counts = [c["usage"]["completion_tokens"] for c in chunks]
            assert len(with_usage) == len(chunks) and counts == sorted(counts) and counts[0] >= 1
            assert all(c["usage"]["prompt_tokens"] == chunks[-1]["usage"]["prompt_tokens"] for c in chunks)
        else:
            assert len(with_usage) == 1


def plain_logprobs(prompt_ids: list[int], top: int) -> list:
    """Plain greedy decoding's logprobs in this process (what every method's server reports, to fp32 rounding)."""
    loaded = load(dtype="float32")
    engine = Engine(loaded.model, 1, len(prompt_ids) + MAX_TOKENS + 8, loaded.tokenizer.stop_ids)
    (request,) = engine.generate([prompt_ids], SamplingParams(max_tokens=MAX_TOKENS, logprobs=top))
    return request.logprobs


def test_logprobs_are_the_targets_in_both_shapes_streamed_or_not(client, in_process):
    tokenizer, _ = in_process
    prompt = "def quicksort(items):\n"
    expected = plain_logprobs(tokenizer.encode(prompt), 3)
    reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, logprobs=3)
    got = reply.choices[0].logprobs
    assert got.tokens == [tokenizer.decode([t.token_id]) for t in expected]
    assert all(abs(a - b.logprob) < 1e-4 for a, b in zip(got.token_logprobs, expected, strict=True))
    assert all(len(top) >= 3 and tokenizer.decode([e.top[0][0]]) in top for top, e in zip(got.top_logprobs, expected))
    assert got.text_offset[0] == 0 and got.text_offset == sorted(got.text_offset)
    messages = [{"role": "user", "content": QUESTION}]
    chat_expected = plain_logprobs(tokenizer.encode_chat(messages), 2)
    chat = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0, logprobs=True, top_logprobs=2
    )
    content = chat.choices[0].logprobs.content
    assert [c.logprob for c in content] == pytest.approx([e.logprob for e in chat_expected], abs=1e-4)
    assert all(len(c.top_logprobs) == 2 and c.bytes == list(c.token.encode()) for c in content)
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0, logprobs=True, top_logprobs=2, stream=True
    )
    streamed = [c for chunk in stream if chunk.choices and chunk.choices[0].logprobs for c in chunk.choices[0].logprobs.content]
    assert [c.token for c in streamed] == [c.token for c in content]
