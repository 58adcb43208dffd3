"""Property-based fuzzing of a real ``speculab serve`` (schemathesis, driven by the server's own OpenAPI schema).

Schemathesis generates requests from ``/openapi.json`` that fit the schema and ones that break it, for every
route, and sends them to a real server on loopback: a tiny random target with a tiny draft model, so every
generated request runs the engine (sampled drafts included) in milliseconds. Bounded: ``EXAMPLES`` requests a
route, each with a timeout. Nothing may be answered 5xx, nothing may hang, and the server must answer afterwards.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.helpers import save_tiny_checkpoint
from tests.servers import start_server, stop_server

pytestmark = pytest.mark.slow

EXAMPLES = 150  # per route; a route whose schema allows fewer distinct cases gets fewer
SERVED = "target"  # the served model's name: half the cases carry it, so that they reach the engine
REQUEST_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    target, draft = save_tiny_checkpoint(root / "target", seed=1), save_tiny_checkpoint(root / "draft", seed=2)
    server = start_server(
        tmp_path_factory,
        *("--model", str(target), "--method", f"draft:draft={draft}", "--max-model-len", "96", "--max-batch", "4", "--max-queue", "64"),
    )
    yield server
    stop_server(server)


def operations(server) -> list:
    """Every route of the server's own OpenAPI schema."""
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


def served(case):
    """The case with the served model's name, which a schema cannot know, where its body is an object."""
    if isinstance(case.body, dict):
        case.body["model"] = SERVED
    return case


def test_no_generated_request_is_answered_5xx(fuzzed_server):
    routes = operations(fuzzed_server)
    assert {op.label for op in routes} >= {"POST /v1/completions", "POST /v1/chat/completions", "GET /version"}
    for op in routes:
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if op.method.upper() == "POST" else [GenerationMode.POSITIVE]

        strategies = [op.as_strategy(generation_mode=m) for m in modes]

        @given(case=st.one_of(*strategies, *(s.map(served) for s in strategies)))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
        def fuzz(case):
            case.call_and_validate(base_url=fuzzed_server.url, checks=[not_a_server_error], timeout=REQUEST_TIMEOUT_S)

        fuzz()


def test_the_server_answers_after_the_fuzzing(fuzzed_server):
    assert fuzzed_server.process.poll() is None
    ok = httpx.post(
        f"{fuzzed_server.v1}/completions", json={"model": SERVED, "prompt": "w5 w6", "max_tokens": 3, "temperature": 0.8}, timeout=30
    )
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1
    families = text_string_to_metric_families(httpx.get(f"{fuzzed_server.url}/metrics", timeout=30).text)
    failed = [s.value for f in families for s in f.samples if s.labels.get("finished_reason") == "error"]
    assert sum(failed) == 0  # no request failed inside the engine
