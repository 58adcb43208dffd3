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

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from speculab.bench import in_process
from speculab.bench.acceptance_pass import run_acceptance_pass
from speculab.bench.auto_policy import tune_untuned
from speculab.bench.contexts import PromptsByContext, context_key
from speculab.bench.memory_fit import skipped_record
from speculab.bench.method_memory import memory_estimate
from speculab.bench.over_http.endpoint import measure_endpoint_cell, probe_all
from speculab.bench.over_http.launched_engines import ReferenceModel, check_commands, engine_label, measure_engine
from speculab.bench.results_store import References, ResultsFile
from speculab.bench.settings import BenchConfig, RunContext, RunState, run_state
from speculab.bench.workload import interleave_domains, load_workload
from speculab.engine import sequence_length
from speculab.free_memory import gib
from speculab.methods import MethodSpec, drafter_path, new_proposer, proposer_options_of
from speculab.models.linear import linear_kind
from speculab.models.memory import machine_memory_bytes
from speculab.prompt_cache import PromptCache
from speculab.testbed import model_record, testbed


def run_bench(cfg: BenchConfig, out: Path, resume: bool = False, progress: bool = True, tuner=None) -> Path:
    """The run (``tuner``: an ``auto_policy.RunTuner``, what tunes an auto row with no policy here); its results file."""
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
        handed = tuner.caches if tuned_now else {}  # the tune's prompt caches: its prompts are the run's first ones
        options_of = proposer_options_of(specs, target.loaded if target else None)  # each drafter loaded once
        loaded = target.loaded if target else reference() if cfg.contexts != (None,) else None
        prompts = PromptsByContext.build(cfg, items, loaded, _room(cfg, specs, options_of))
        warm_up = partial(in_process.warm_up, specs=specs, options_of=options_of, progress=progress)
        if target is not None:
            target = _at_context(target, prompts, prompts.contexts[0], cfg, references, warm_up, handed)
        sizing = in_process.sizing(cfg, target, state.previous_run, prompts)
        tuned = {"tuned_now_s": tuned_now} if tuned_now else {}
        results.append(run_record(cfg, state.run_id, target, bool(state.done), endpoints) | sizing | tuned | prompts.record())
        total = _tokens_left(cfg, state, specs, endpoints, sizing, prompts)
        with tqdm(total=total, desc="bench", unit="tok", disable=not progress, smoothing=0.05) as bar:
            run = RunContext(cfg, state, results, out, bar, progress)
            for context in prompts.contexts:
                run.context = context
                if target is not None and context != prompts.contexts[0]:
                    target = _at_context(target, prompts, context, cfg, references, warm_up, handed)
                cells = _ContextCells(prompts, context, sizing.get("prompts_per_cell", {}).get(context_key(context), {}))
                _measure_cells(run, target, specs, options_of, cells, endpoints, references)
                _measure_launched(run, cells, reference, references, target)
                if context is None:  # the pass's prompts are the workload's own: their prompt cache is this one
                    _acceptance_pass(run, target, specs, options_of)
            if None not in prompts.contexts and target is not None:  # the pass's prompts are the workload's own
                target.cache = PromptCache() if cfg.prompt_cache else None
                _acceptance_pass(run, target, specs, options_of)
    return results.path


def _acceptance_pass(run: RunContext, target, specs: list[MethodSpec], options_of: dict) -> None:
    """The in-process methods' untimed acceptance pass, where the run has one (``cfg.acceptance_pass``)."""
    if target is None or not run.cfg.acceptance_pass:
        return
    run.context = None
    run_acceptance_pass(target, specs, options_of, run)


def _room(cfg: BenchConfig, specs: list[MethodSpec], options_of: dict) -> int:
    """The positions a request needs after its prompt: its output and the most any method's drafting needs."""
    return max([sequence_length(0, cfg.max_tokens, new_proposer(s, options_of[s.label])) for s in specs] + [cfg.max_tokens + 16])


def _at_context(
    target, prompts: PromptsByContext, context, cfg: BenchConfig, references: References, warm_up, handed: dict
) -> in_process.Target:
    """The target with ``context``'s prompts (the previous context's prompt cache released first: its bytes come back),
    their prompt cache filled by ``warm_up`` (from the one a tune filled at this context, ``handed``: its prompts are
    this context's first ones, their prefill not run twice) and this run's baselines there (a resumed run's) as
    references."""
    target.cache = None
    handed_cache = handed.pop(context_key(context), None)
    target = in_process.with_prompts(target, prompts.items[context], prompts.ids[context], cfg.prompt_cache, handed_cache)
    target.baseline_outputs, target.baseline_margins = references.at_context(context)
    warm_up(target, what=f" at {prompts.label(context)}" if len(prompts.contexts) > 1 else "")
    return target


def _tokens_left(cfg: BenchConfig, state: RunState, specs: list[MethodSpec], endpoints: dict, sizing: dict, prompts) -> int:
    """Output tokens the run's cells have left to generate (the progress bar's total)."""
    cells = []
    for context in prompts.contexts:
        per_batch, num_items = sizing.get("prompts_per_cell", {}).get(context_key(context), {}), len(prompts.items[context])
        sizes = prompts.batch_sizes[context]
        cells += [per_batch.get(b, num_items) for b in sizes for s in specs if state.pending(s.label, b, context)]
        cells += [num_items for b in sizes for info in endpoints.values() if state.pending(info.label, b, context)]
        launched = [engine_label(e, s) for e in cfg.launched for s in cfg.methods]
        cells += [num_items for b in sizes for label in launched if state.pending(label, b, context)]
    return sum(cells) * cfg.max_tokens * cfg.repeats


@dataclass(frozen=True)
class _ContextCells:
    """What one context's cells run: its prompts and how many of them each batch size takes."""

    prompts: PromptsByContext
    context: int | None
    prompts_per_batch: dict[int, int]

    @property
    def items(self) -> list:
        return self.prompts.items[self.context]

    def fields(self, num_prompts: int) -> dict:
        """What a cell records of its context: the median prompt tokens of its ``num_prompts`` (the first) prompts."""
        return {"context_tokens": self.prompts.median_of(self.context, num_prompts)}


def _measure_cells(
    run: RunContext, target, specs: list[MethodSpec], options_of: dict, cells: _ContextCells, endpoints: dict, references
) -> None:
    """Every timed cell left at the run's context, batch-major; within a batch size the in-process methods' repeats
    take turns in rounds (``in_process.measure_in_rounds``): the cells compared with each other run seconds apart, so a
    shared machine's drift in speed reaches them alike. Then the endpoints at that batch size, their baseline first."""
    served = sorted(endpoints.items(), key=lambda e: e[1].method != "baseline")
    for batch_size in cells.prompts.batch_sizes[cells.context]:
        pending = [s for s in specs if run.pending(s.label, batch_size)]
        if pending:
            _measure_in_process(run, target, pending, options_of, batch_size, cells)
        for what in served:
            if run.pending(what[1].label, batch_size):
                run.show(f"{what[1].label} b{batch_size}")
                run.write(_endpoint_cell(what, batch_size, cells, references, run))


def _measure_launched(run: RunContext, cells: _ContextCells, reference: ReferenceModel, references: References, target) -> None:
    """The launched engines' cells at the run's context, their baselines compared with speculab's own."""
    if not run.cfg.launched:
        return
    ours = {b: [reference().tokenizer.decode(ids) for ids in outs] for b, outs in target.baseline_outputs.items()} if target else {}
    for engine in run.cfg.launched:
        known = references.engine_texts(engine, cells.context)
        sizes = cells.prompts.batch_sizes[cells.context]
        counted = [len(ids) for ids in cells.prompts.ids.get(cells.context, [])] or None  # None: the run loaded no tokenizer
        fields = cells.fields(len(cells.items))
        measure_engine(
            engine, run, cells.items, reference, ours, batch_sizes=sizes, prompt_tokens=counted, baseline_texts=known, cell_fields=fields
        )


def _measure_in_process(
    run: RunContext, target, pending: list[MethodSpec], options_of: dict, batch_size: int, cells: _ContextCells
) -> None:
    """One batch size's in-process cells, in rounds as memory allows (``memory_fit``): a cell it cannot hold is
    recorded as skipped, with its reason and bytes."""
    num_prompts = cells.prompts_per_batch.get(batch_size, len(target.prompts))
    fit = in_process.rounds_fit(target.first(num_prompts), pending, options_of, batch_size, run.cfg)
    if fit.release_cache and target.cache is not None:
        run.show(f"b{batch_size}: releasing the prompt cache ({gib(target.cache.nbytes)}) for memory")
        target.cache = None
    for spec in pending:
        if spec.label in fit.skipped:
            run.write(skipped_record(spec.label, spec.name, batch_size, fit))
    measured = [s for s in pending if s.label not in fit.skipped]
    prompts = target.first(num_prompts)
    for cell in in_process.measure_in_rounds(prompts, measured, options_of, batch_size, run.cfg, run, fit) if measured else []:
        run.write(cell | fit.cell_fields(cell["label"]) | cells.fields(num_prompts) | {"transport": "in-process", "engine": "speculab"})


def _endpoint_cell(served: tuple, batch_size: int, cells: _ContextCells, references: References, run: RunContext) -> dict:
    endpoint, info = served
    at = (info.engine, batch_size, cells.context)
    cell = measure_endpoint_cell(endpoint, info, cells.items, batch_size, run.cfg, references.texts.get(at), run.bar)
    if info.method == "baseline":
        references.texts[at] = cell["output_texts"]
    return cell | cells.fields(len(cells.items))


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
