"""`speculab serve --method suffix` (fp32, the real model): lossless, and its tree of earlier outputs serves the next
request, as ArcticInference's global cache does in vLLM."""

from __future__ import annotations

import httpx
import pytest

from speculab.bench.over_http.server_stats import parse_spec_counters
from speculab.engine import Engine
from speculab.runtime import load
from speculab.sampling import SamplingParams
from tests.servers import MODEL, start_server, stop_server

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")
QUESTION = "Write a Python class for a bank account with deposit, withdraw and a balance property."
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def suffix_server(tmp_path_factory):
    server = start_server(tmp_path_factory, "--method", "suffix", "--max-batch", "4", "--max-model-len", "2048")
    yield server
    stop_server(server)


def accepted_and_drafted(server) -> tuple[float, float]:
    counters = parse_spec_counters(httpx.get(f"{server.url}/metrics", timeout=30).text)
    return counters.values.get("num_accepted_tokens", 0.0), counters.values.get("num_draft_tokens", 0.0)


def test_a_repeated_request_is_drafted_from_the_first_ones_output(suffix_server):
    loaded = load(dtype="float32")
    ids = loaded.tokenizer.encode_chat([{"role": "user", "content": QUESTION}])
    (plain,) = Engine(loaded.model, 1, len(ids) + MAX_TOKENS + 16, loaded.tokenizer.stop_ids).generate(
        [ids], SamplingParams(max_tokens=MAX_TOKENS)
    )
    client = openai.OpenAI(base_url=suffix_server.v1, api_key="unused", timeout=120, max_retries=0)
    rates = []
    for _ in range(2):
        before = accepted_and_drafted(suffix_server)
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=MAX_TOKENS, temperature=0
        )
        assert reply.choices[0].message.content == loaded.tokenizer.decode(plain.output_ids)  # lossless
        after = accepted_and_drafted(suffix_server)
        rates.append((after[0] - before[0]) / max(after[1] - before[1], 1.0))
    # the second time, the shared tree holds the first answer: its drafts are that answer, and all of it is accepted
    assert rates[1] >= 0.9 > rates[0], rates
