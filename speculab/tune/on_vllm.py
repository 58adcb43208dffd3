"""``speculab tune --engine vllm``: the draft length per batch size, measured on the real vLLM that will serve.

The order: one vLLM launch per candidate draft length k (0 = plain decoding, up to the method's chain), each launch
reused across the batch sizes (``bench.over_http.launched_engines.measure_engine``: every prompt once, then at each
batch size a short untimed pass and ``repeats`` timed passes of output tok/s, with vLLM's own ``/metrics``
counters); the choice (``schedule.choose``); the policy written to ``OUT/policy.json`` and as vLLM's
``num_speculative_tokens_per_batch_size`` (``speculab.launch.vllm``); a relaunch with that schedule, measured at
every batch size and compared with each fixed k (``schedule.check``). One server at a time: with a second vLLM beside
it, taking turns pass by pass, plain decoding ran 7-28% slower on a 2-core machine than alone, which buys no
precision (BENCHMARKS.md, "`speculab tune --engine vllm`"). Every cell goes to ``OUT/results.jsonl`` as ``speculab bench
--engine vllm`` writes them, so ``speculab report`` reads it and ``--resume`` continues a killed tune; the tune's own
record follows the cells.

Knows: the candidates, the order and the sizing (each batch size runs one wave of prompts, at least
``MIN_PROMPTS``). Does not know: vLLM's flags, how a cell is measured, or the arithmetic of the choice.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from speculab.bench.over_http.launched_engines import ReferenceModel, check_plans, engine_label, measure_engine
from speculab.bench.results_store import References, ResultsFile
from speculab.bench.resume import FLAGS, recorded_config, refuse_contradictions
from speculab.bench.runner import run_record
from speculab.bench.settings import BenchConfig, RunContext, run_state
from speculab.bench.workload import interleave_domains, load_workload
from speculab.launch.prepare import prepare
from speculab.launch.vllm import chain_length
from speculab.methods import BUDGET, POLICY, MethodSpec, parse_method
from speculab.runtime import hardware_dtype
from speculab.speculative.policy import SpeculationPolicy
from speculab.testbed import testbed
from speculab.tune.schedule import Measured, check, choose_schedule

ENGINE = "vllm"
MIN_PROMPTS = 4  # a batch-1 pass of 4 prompts x 64 tokens takes about 5 s of vLLM-CPU on a 2-core EPYC
TUNE_FLAGS = {**FLAGS, "methods": "--method/--draft", "profile": "--engine"}


def with_chain(spec: MethodSpec, k: int) -> MethodSpec:
    """``spec`` drafting chains of ``k`` tokens as vLLM runs it (k = 0: plain decoding)."""
    if k == 0:
        return parse_method("baseline")
    if spec.name in ("eagle", "eagle3"):  # vLLM verifies chains: one child a step, no batch budget
        return MethodSpec(spec.name, {**spec.params, "num_steps": k, "topk": 1, "num_draft_tokens": k + 1, BUDGET: None})
    return MethodSpec(spec.name, {**spec.params, "num_speculative_tokens": k})


def candidates(spec: MethodSpec) -> list[MethodSpec]:
    """Plain decoding, then every chain length up to the method's."""
    return [with_chain(spec, k) for k in range(chain_length(spec) + 1)]


def prompts_per_batch(batch_sizes: tuple[int, ...], num_prompts: int) -> dict[int, int]:
    """One wave of the batch size, at least MIN_PROMPTS, at most ``num_prompts``: more passes of fewer prompts make
    the median steadier than fewer passes of more."""
    return {b: min(num_prompts, max(MIN_PROMPTS, b)) for b in batch_sizes}


def tune_config(args: argparse.Namespace, spec: MethodSpec) -> BenchConfig:
    """The sweep's settings, as a ``speculab bench --engine vllm`` run of every candidate."""
    batch_sizes = tuple(args.batch_sizes)
    return BenchConfig(
        methods=tuple(candidates(spec)),
        batch_sizes=batch_sizes,
        num_prompts=args.num_prompts or min(124, max(MIN_PROMPTS, max(batch_sizes))),
        max_tokens=args.max_tokens or 64,
        repeats=args.repeats,
        workload=args.workload,
        profile=f"tune-{ENGINE}",
        dtype=args.dtype or hardware_dtype("cpu"),  # what `speculab launch vllm` runs it in
        model=args.model,
        engines=(ENGINE,),
        engine_python=args.engine_python,
        engine_port=args.engine_port,
        tp=args.tp,
    )


def measured_cells(results: ResultsFile, run_id: str, k_of: dict[str, int]) -> list[Measured]:
    """The run's cells of the given labels (label -> k), each pass's tok/s (the last record of each label and size)."""
    cells = {}
    for r in results.read():
        if r.get("kind") == "cell" and r.get("run_id") == run_id and r.get("label") in k_of:
            cells[(r["label"], r["batch_size"])] = Measured(k_of[r["label"]], r["batch_size"], tuple(r["tok_s_repeats"]))
    return list(cells.values())


def tune_vllm(args: argparse.Namespace, spec: MethodSpec, out: Path) -> dict:
    """The sweep, the choice, the check and the record (see the module docstring); returns the tune record."""
    cfg = tune_config(args, spec)
    if args.resume:
        refuse_contradictions(cfg, recorded_config(out), out, TUNE_FLAGS)
    load_workload(cfg.workload)  # a bad workload fails before vLLM starts
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.jsonl")
    with results.hold():
        previous = results.read()
        if previous and not args.resume:
            raise FileExistsError(f"{results.path} exists: pass --resume to continue that tune, or another --out")
        state = run_state(previous, args.resume)
        results.truncate_partial_line()
        sizes = prompts_per_batch(cfg.batch_sizes, cfg.num_prompts)
        items = interleave_domains(load_workload(cfg.workload), cfg.num_prompts)
        reference = ReferenceModel(cfg.model, cfg.dtype)
        check_plans([ENGINE], cfg, reference.path, out)  # every candidate's command, before anything runs
        results.append(run_record(cfg, state.run_id, None, bool(state.done), {}) | {"prompts_per_batch": sizes})
        passes = (len(cfg.methods) + 1) * sum(sizes.values()) * cfg.max_tokens * cfg.repeats
        with tqdm(total=passes, desc=f"tune {ENGINE} {spec.name}", unit="tok", disable=args.quiet, smoothing=0.05) as bar:
            run = RunContext(cfg, state, results, out, bar, not args.quiet)
            record = _sweep_choose_check(run, spec, items, reference, sizes)
        results.append(record)
    return record


def _baselines(run: RunContext) -> dict[int, list[str]]:
    """vLLM's plain greedy outputs this run measured, by batch size: every other cell's reference."""
    texts = References.of_run(run.results.read(), run.state.run_id).texts
    return {b: t for (engine, b), t in texts.items() if engine == ENGINE}


def _sweep_choose_check(run: RunContext, spec: MethodSpec, items, reference: ReferenceModel, sizes: dict[int, int]) -> dict:
    cfg = run.cfg
    measure_engine(ENGINE, run, items, reference, {}, prompts_per_batch=sizes, baseline_texts=_baselines(run))
    k_of = {engine_label(ENGINE, c): k for k, c in enumerate(cfg.methods)}
    measured = measured_cells(run.results, run.state.run_id, k_of)
    chosen = choose_schedule(measured)
    policy = SpeculationPolicy.from_caps(chosen)
    policy_path = run.out / "policy.json"
    policy_path.write_text(json.dumps(policy.to_dict(), indent=1) + "\n")
    if not any(chosen.values()):  # plain decoding at every batch size: vLLM without --speculative-config
        launch = {"command": "no --speculative-config: plain decoding at every batch size"}
        return tune_record(
            run, spec, k_of=k_of, measured=measured, policy=policy, chosen=chosen, checked=[m for m in measured if m.k == 0], launch=launch
        )
    longest = with_chain(spec, max(chosen.values()))  # vLLM drafts no more than the schedule's most
    scheduled = MethodSpec(spec.name, {**longest.params, POLICY: str(policy_path.resolve())})
    check_run = replace(run, cfg=replace(cfg, methods=(scheduled,)))
    measure_engine(ENGINE, check_run, items, reference, {}, prompts_per_batch=sizes, baseline_texts=_baselines(run))
    checked = measured_cells(run.results, run.state.run_id, {engine_label(ENGINE, scheduled): 0})
    checked = [replace(c, k=chosen[c.batch_size]) for c in checked]
    command = prepare(ENGINE, scheduled, reference.path, run.out / "servers", tp=cfg.tp, dtype=cfg.dtype, python=cfg.engine_python)
    launch = command.record() | {"explained": command.explain(), "method": f"{longest.text},policy={policy_path}"}
    return tune_record(run, spec, k_of=k_of, measured=measured, policy=policy, chosen=chosen, checked=checked, launch=launch)


def tune_record(
    run: RunContext,
    spec: MethodSpec,
    *,
    k_of: dict[str, int],
    measured: list[Measured],
    policy: SpeculationPolicy,
    chosen: dict[int, int],
    checked: list[Measured],
    launch: dict,
) -> dict:
    """The tune's record: each k's tok/s by batch size, the choice, the schedule, its check, the command."""
    checked_by_size = check(measured, checked, chosen)
    return {
        "kind": "tune",
        "run_id": run.state.run_id,
        "engine": ENGINE,
        "method": spec.label,
        "spec": spec.text,
        "testbed": testbed(),
        "candidates": k_of,
        "sweep": {str(b): {str(m.k): m.summary() for m in sorted(measured, key=lambda m: m.k) if m.batch_size == b} for b in chosen},
        "chosen": {str(b): k for b, k in chosen.items()},
        "policy": policy.to_dict(),
        "policy_file": str(run.out / "policy.json"),
        "schedule": policy.ranges(),
        "check": {str(b): c for b, c in checked_by_size.items()},
        # where vLLM without a speculative config beats the schedule beyond the spread: serve those loads plainly
        "plain_faster_at": [b for b, c in checked_by_size.items() if c["plain_se_below"] > 1.0],
        "launch": launch,
    }
