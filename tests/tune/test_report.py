"""``tune --engine vllm``'s printed table, from a record built of measured cells as ``on_vllm.tune_record`` builds it:
a server that decodes plainly says why, with each whole-server choice's worst loss, and prints no per-batch-size k."""

from __future__ import annotations

import io

from speculab.policy.engines import vllm_budget
from speculab.policy.table import SpeculationPolicy
from speculab.tune.engine_choice import Measured, check, choose_for_server, drafting_or_plain
from speculab.tune.report import print_engine_report


def _record(rates: dict[int, dict[int, float]]) -> dict:
    measured = [Measured(k, b, (r - 1, r, r + 1)) for b, row in rates.items() for k, r in row.items()]
    chosen = choose_for_server(measured)
    checked = (
        [m for m in measured if m.k == 0]
        if not any(chosen.values())
        else [Measured(chosen[b], b, (rates[b][chosen[b]],) * 3) for b in rates]
    )
    options = drafting_or_plain(measured)
    sweep = {str(b): {str(m.k): m.summary() for m in measured if m.batch_size == b} for b in rates}
    return {
        "method": "ngram",
        "engine": "vllm",
        "testbed": {"cpu": "AMD EPYC", "cpu_flags": ["avx2"]},
        "launch": {"command": "no --speculative-config: plain decoding at every batch size"},
        "sweep": sweep,
        "chosen": {str(b): k for b, k in chosen.items()},
        "per_batch_size": vllm_budget(SpeculationPolicy.by_batch_size(chosen), max(chosen.values())).config.get(
            "num_speculative_tokens_per_batch_size", []
        ),
        "check": {str(b): c for b, c in check(measured, checked, chosen).items()},
        "drafting_or_plain": options | {"drafting": {str(b): k for b, k in options["drafting"].items()}},
        "plain_faster_at": [],
        "policy_file": "OUT/policy.json",
    }


def test_a_plainly_decoding_server_says_why_and_prints_no_per_batch_size_k():
    out = io.StringIO()
    print_engine_report(_record({1: {0: 51.6, 4: 62.9}, 16: {0: 211.2, 1: 131.3}}), out)
    text = out.getvalue()
    assert "drafting {'1': 4, '16': 1} would fall up to 1.61x below the best" in text and "plain decoding up to 1.22x" in text
    assert "plain decoding chosen" in text and "num_speculative_tokens_per_batch_size" not in text
    assert "no --speculative-config" in text


def test_a_drafting_server_prints_its_k_per_batch_size():
    out = io.StringIO()
    print_engine_report(_record({1: {0: 50.0, 2: 75.0}, 16: {0: 200.0, 1: 190.0}}), out)
    text = out.getvalue()
    assert "num_speculative_tokens_per_batch_size: [[1, 15, 2], [16, 16, 1]]" in text and "drafting chosen" in text
