"""SGLang's speculation stats, parsed from fixtures recorded from its source (tests/launch/fixtures/PROVENANCE.md)."""

from __future__ import annotations

import json
from pathlib import Path

from speculab.bench.over_http.endpoint import RequestResult, cell_figures
from speculab.bench.over_http.server_stats import parse_spec_counters, response_spec

FIXTURES = Path(__file__).parents[2] / "launch" / "fixtures"


def test_sglang_counters_give_tau_and_no_acceptance_rate():
    text = (FIXTURES / "sglang-metrics.txt").read_text()
    figures = parse_spec_counters(text).figures()
    assert figures["tau"] == 2560.0 / 880.0 and figures["steps"] == 880
    assert figures["acceptance_rate"] is None  # SGLang counts no draft tokens; its accept-rate is a gauge of one batch
    empty = parse_spec_counters(text.replace("880.0", "0.0")).figures()
    assert empty["tau"] is None


def test_sglang_openai_response_details():
    body = json.loads((FIXTURES / "sglang-chat-response.json").read_text())
    spec = response_spec(body)
    details = body["sglext"]["spec_tokens_details"]
    assert (spec.steps, spec.accepted, spec.drafted) == (
        details["spec_verify_ct"],
        details["spec_num_correct_drafts"],
        details["spec_num_proposed_drafts"],
    )


def test_sglang_stream_carries_the_details_in_its_last_chunk():
    chunks = [
        json.loads(line[len("data: ") :])
        for line in (FIXTURES / "sglang-chat-stream.txt").read_text().splitlines()
        if line.startswith("data: {")
    ]
    final = next(c for c in reversed(chunks) if c.get("sglext"))
    assert final["choices"] == []
    assert response_spec(final).steps == 22


def test_sglang_generate_meta_info():
    body = json.loads((FIXTURES / "sglang-generate-response.json").read_text())
    meta = body["meta_info"]
    spec = response_spec(body)
    assert (spec.steps, spec.accepted, spec.drafted) == (
        meta["spec_verify_ct"],
        meta["spec_num_correct_drafts"],
        meta["spec_num_proposed_drafts"],
    )
    old = response_spec({"meta_info": {"spec_verify_ct": 8, "completion_tokens": 20}})  # before 0.5.2x: the verify count only
    assert (old.steps, old.accepted, old.drafted) == (8, 12, None)


def test_a_cell_prefers_sglang_responses_over_its_approximate_counters():
    body = json.loads((FIXTURES / "sglang-chat-response.json").read_text())
    results = [RequestResult("python", "x", ok=True, output_tokens=64, ttft=0.1, e2el=1.0, spec=response_spec(body))]
    figures = cell_figures(results, 1.0, parse_spec_counters((FIXTURES / "sglang-metrics.txt").read_text()))
    assert figures["acceptance_source"] == "responses"
    assert figures["acceptance_rate"] == 41 / 66 and figures["acceptance_by_domain"] == {"python": 41 / 66}
