"""``speculab bench``: a run from its settings to ``results.jsonl``, one way.

The order: the run's state (``settings.py``: which run, which cells are left) -> the checks that can fail before any model
loads (endpoints answer, launched engines can run every method) -> the target, a tuned policy for each auto row that has none here (``auto_policy.py``), the warm-up (``in_process.py``)
-> the run record (settings, machine, models, memory estimates, sizing) -> every cell, batch-major, each kind by
its executor: in-process (``in_process.py``: the methods of one batch size in rounds, taking turns), an endpoint (``over_http/endpoint.py``), an engine speculab launches
(``over_http/launched_engines.py``) -> the in-process methods' untimed acceptance pass (``acceptance_pass.py``) ->
each record appended as it arrives (``results_store.py``). A killed run
resumes with ``--resume``: the cells it measured are skipped and a cut last line is dropped.

Does not know: the report (``report/``, which reads only the results file) or how proposers work.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import torch
from tqdm import tqdm

from speculab.bench import in_process
from speculab.bench.acceptance_pass import run_acceptance_pass
from speculab.bench.auto_policy import tune_untuned
from speculab.bench.memory_fit import skipped_record
from speculab.bench.over_http.endpoint import measure_endpoint_cell, probe_all
from speculab.bench.over_http.launched_engines import ReferenceModel, check_commands, engine_label, measure_engine
from speculab.bench.results_store import References, ResultsFile
from speculab.bench.settings import BenchConfig, RunContext, RunState, run_state
from speculab.bench.workload import interleave_domains, load_workload
from speculab.free_memory import gib
from speculab.methods import MethodSpec, drafter_path, proposer_options, spec_draft_vocab_size
from speculab.models.config import ModelConfig
from speculab.models.eagle_head import read_head_config
from speculab.models.linear import linear_kind
from speculab.models.memory import estimate, machine_memory_bytes
from speculab.testbed import model_record, testbed


def run_bench(cfg: BenchConfig, out: Path, resume: bool = False, progress: bool = True, tuner=None) -> Path:
    """The run (``tuner``: what tunes an auto row with no policy here, ``auto_policy.tune_untuned``); its results file."""
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.jsonl")
    with results.hold():  # a second `speculab bench` on this --out is refused while this one runs
        previous = results.read()
        if previous and not resume:
            raise FileExistsError(f"{results.path} exists: pass --resume to continue that run, or another --out")
        state = run_state(previous, resume)
        results.truncate_partial_line()
        endpoints = probe_all(cfg.endpoints)  # a server that is down fails the run before any model loads
        references = References.of_run(previous, state.run_id)
        items = interleave_domains(load_workload(cfg.workload), cfg.num_prompts)
        target = in_process.load_target(cfg, items) if cfg.in_process else None
        reference = ReferenceModel(cfg.model, cfg.dtype, target.loaded if target else None)
        check_commands(cfg.launched, cfg, reference.path, out)  # a method a launched engine cannot run fails before any cell
        specs = sorted(cfg.in_process, key=lambda s: s.name != "baseline")  # the baseline first: it is the reference
        # an auto row (policy=auto) with no tuned policy here has one tuned now, before any cell is timed
        tuned_now = tune_untuned(specs, target.loaded, cfg.workload, progress, tuner) if target is not None else {}
        options_of = {s.label: proposer_options(s, target.loaded if target else None) for s in specs}  # drafters loaded once
        if target is not None:
            target.baseline_outputs, target.baseline_margins = references.outputs, references.margins
            in_process.warm_up(target, specs, options_of, progress)
        sizing = in_process.sizing(cfg, target, state.previous_run)
        tuned = {"tuned_now_s": tuned_now} if tuned_now else {}
        results.append(run_record(cfg, state.run_id, target, bool(state.done), endpoints) | sizing | tuned)
        with tqdm(
            total=_tokens_left(cfg, state, specs, endpoints, sizing, len(items)),
            desc="bench",
            unit="tok",
            disable=not progress,
            smoothing=0.05,
        ) as bar:
            run = RunContext(cfg, state, results, out, bar, progress)
            _measure_cells(run, target, specs, options_of, sizing, endpoints, items, references)
            if target is not None:
                run_acceptance_pass(target, specs, options_of, run)
            ours = (
                {b: [target.loaded.tokenizer.decode(ids) for ids in outs] for b, outs in target.baseline_outputs.items()} if target else {}
            )
            for engine in cfg.launched:
                known = {b: texts for (e, b), texts in references.texts.items() if e == engine}
                measure_engine(engine, run, items, reference, ours, baseline_texts=known)
    return results.path


def _tokens_left(cfg: BenchConfig, state: RunState, specs: list[MethodSpec], endpoints: dict, sizing: dict, num_items: int) -> int:
    """Output tokens the run's cells have left to generate (the progress bar's total)."""
    per_batch = sizing.get("prompts_per_batch", {})
    cells = [per_batch.get(b, num_items) for b in cfg.batch_sizes for s in specs if state.pending(s.label, b)]
    cells += [num_items for b in cfg.batch_sizes for info in endpoints.values() if state.pending(info.label, b)]
    cells += [num_items for e in cfg.launched for s in cfg.methods for b in cfg.batch_sizes if state.pending(engine_label(e, s), b)]
    return sum(cells) * cfg.max_tokens * cfg.repeats


def _measure_cells(
    run: RunContext, target, specs: list[MethodSpec], options_of: dict, sizing: dict, endpoints: dict, items, references
) -> None:
    """Every timed cell left, batch-major; within a batch size the in-process methods' repeats take turns in rounds
    (``in_process.measure_in_rounds``): the cells compared with each other run seconds apart, so a shared machine's
    drift in speed reaches them alike. Then the endpoints at that batch size, their baseline first."""
    served = sorted(endpoints.items(), key=lambda e: e[1].method != "baseline")
    for batch_size in run.cfg.batch_sizes:
        pending = [s for s in specs if run.state.pending(s.label, batch_size)]
        if pending:
            _measure_in_process(run, target, pending, options_of, batch_size, sizing["prompts_per_batch"][batch_size])
        for what in served:
            if run.state.pending(what[1].label, batch_size):
                run.show(f"{what[1].label} b{batch_size}")
                run.write(_endpoint_cell(what, batch_size, items, references, run))


def _measure_in_process(run: RunContext, target, pending: list[MethodSpec], options_of: dict, batch_size: int, num_prompts: int) -> None:
    """One batch size's in-process cells, in rounds as memory allows (``memory_fit``): a cell it cannot hold is
    recorded as skipped, with its reason and bytes."""
    fit = in_process.rounds_fit(target.first(num_prompts), pending, options_of, batch_size, run.cfg)
    if fit.release_cache and target.cache is not None:
        run.show(f"b{batch_size}: releasing the prompt cache ({gib(target.cache.nbytes)}) for memory")
        target.cache = None
    for spec in pending:
        if spec.label in fit.skipped:
            run.write(skipped_record(spec.label, spec.name, batch_size, fit))
    measured = [s for s in pending if s.label not in fit.skipped]
    prompts = target.first(num_prompts)
    for cell in in_process.measure_in_rounds(prompts, measured, options_of, batch_size, run.cfg, run, fit.in_turns) if measured else []:
        run.write(cell | fit.cell_fields(cell["label"]) | {"transport": "in-process", "engine": "speculab"})


def _endpoint_cell(served: tuple, batch_size: int, items, references: References, run: RunContext) -> dict:
    endpoint, info = served
    cell = measure_endpoint_cell(endpoint, info, items, batch_size, run.cfg, references.texts.get((info.engine, batch_size)), run.bar)
    if info.method == "baseline":
        references.texts[(info.engine, batch_size)] = cell["output_texts"]
    return cell


def run_record(cfg: BenchConfig, run_id: str, target: in_process.Target | None, resumed: bool, endpoints: dict) -> dict:
    """The run's first record: its settings, the machine, the models and each method's memory estimate."""
    memory, drafters, models, loaded = {}, {}, {}, target.loaded if target else None
    if loaded is not None:
        dtype_bytes = torch.finfo(loaded.model.dtype).bits // 8
        kv_bytes = torch.finfo(loaded.model.kv_dtype or loaded.model.dtype).bits // 8
        device_bytes = machine_memory_bytes()
        for spec in cfg.in_process:
            memory[spec.label] = memory_estimate(spec, loaded.model.config, dtype_bytes, device_bytes, kv_bytes)
            if (path := drafter_path(spec)) is not None:
                drafters[spec.label] = model_record(path)
        models = {"target": model_record(loaded.path), "drafters": drafters}
    return {
        "kind": "run",
        "run_id": run_id,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "resumed": resumed,
        "config": cfg.record()
        | {
            "dtype": loaded.dtype if loaded is not None else cfg.dtype,
            "kv_dtype": loaded.kv_dtype if loaded is not None else None,
            "linear_kernels": linear_kind(loaded.model) if loaded is not None else None,
        },
        "testbed": testbed(),
        "models": models,
        "memory": memory,
        "endpoints": {info.label: asdict(info) | {"url": ep.root} for ep, info in endpoints.items()},
    }


def memory_estimate(spec: MethodSpec, target: ModelConfig, dtype_bytes: int, device_bytes: int, kv_bytes: int | None = None) -> dict:
    """``memory.estimate`` for a method: its drafter's kind (its entry's ``memory_kind``), config and reduced vocabulary;
    ``kv_bytes`` per cached value (None: ``dtype_bytes``)."""
    kind, path = spec.method.memory_kind, drafter_path(spec)
    drafter_cfg, options = None, {}
    if kind == "draft":
        drafter_cfg = ModelConfig.from_file(path / "config.json")
    elif kind in ("eagle", "eagle3"):
        raw, drafter_cfg, _ = read_head_config(path)
        options = {"draft_vocab_size": raw["draft_vocab_size"]} if kind == "eagle3" and "draft_vocab_size" in raw else {}
    size = spec_draft_vocab_size(spec)
    if kind == "eagle3" and size is not None:  # the head's own rows, cut as it loads (at most that many)
        options = {"draft_vocab_size": min(size, options.get("draft_vocab_size", size))}
    elif size is not None:
        options = {"draft_vocab_size": size}  # the proposer's own copy of that many lm_head rows
    return estimate(target, kind, drafter_cfg, dtype_bytes, device_bytes, kv_dtype_bytes=kv_bytes, **options)
