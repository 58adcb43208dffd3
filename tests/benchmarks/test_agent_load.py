"""benchmarks/agent_load.py reads GuideLLM's JSON report as GuideLLM 0.8.1 writes it (a real report, trimmed to the
fields the script reads: ``fixtures/guidellm-report.json``), and sums a sessions run's memory as it should."""

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
REPORT = Path(__file__).parent / "fixtures" / "guidellm-report.json"


@pytest.fixture(scope="module")
def agent_load():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import agent_load

        yield agent_load
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_a_guidellm_benchmark_gives_its_own_figures_and_what_each_turns_first_token_bought(agent_load):
    two_streams = json.loads(REPORT.read_text())["benchmarks"][1]
    cell = agent_load.guidellm_cell(two_streams)
    assert cell["streams"] == 2 and cell["requests"] == 6 and cell["errored"] == 0
    assert cell["time_to_first_token_ms"]["p50"] == pytest.approx(61.709, abs=1e-3)  # GuideLLM's own median
    assert cell["output_tok_s"] == pytest.approx(139.95, abs=1e-2)
    # the first turns: 131 tokens in 57.5 ms and 139 in 61.0 ms; the later turns' cached tokens, unreported, count 0
    assert cell["first_turn_prefill_tok_s"]["median"] == pytest.approx(2278.6, abs=0.1)
    assert cell["later_turn_cached_share"] == {"median": 0.0, "min": 0.0, "max": 0.0}
    assert cell["later_turn_ttft_ms"]["min"] == 62 and cell["later_turn_ttft_ms"]["max"] == 64


def test_a_sessions_run_reads_rss_growth_after_the_50th_request_and_the_caches_peak(agent_load):
    rows = [
        {"rss_mib": 1000 + (i if i < 50 else 50), "cache_bytes": (i % 7) * 2**20, "evicted": i // 10, "turn": 1 + i % 3}
        | {"prompt_tokens": 100, "cached_tokens": 0 if i % 3 == 0 else 80, "ttft_s": 1.0}
        for i in range(120)
    ]
    summary = agent_load.memory_summary(rows, 2**30)
    assert summary["rss_growth_mib_from_request_50"] == 1  # request 50 read 1049, the last 1050
    assert summary["cache_max_mib"] == 6 and summary["cache_cap_mib"] == 1024 and summary["evicted_prompts"] == 11
    assert summary["hit_share_later_turns"] == {"median": 0.8, "min": 0.8, "max": 0.8}
    assert summary["rss_mib_after_request"] == {"1": 1000, "25": 1024, "50": 1049, "100": 1050, "120": 1050}
