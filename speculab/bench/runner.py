"""``speculab bench``: methods × batch sizes on a workload, each cell appended to ``results.jsonl``.

Knows: the profiles (``quick``: enough prompts to fill batch 16, short outputs,
the prompts' prefill shared through a prompt cache; ``full``: the study's 100
prompts × 600 tokens), warm-up, repeats (median tok/s), fixed seeds, what is
measured per cell (tok/s in total and per request, TTFT, TPOT and ITL at p50
and p99, τ and acceptance overall, per domain and per position, peak memory,
greedy identity with the baseline), and resuming a killed run (cells already
in ``results.jsonl`` for the run are skipped; a cut last line is dropped).

Does not know: the report (``report.py``) or how proposers work.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import torch
from tqdm import tqdm

from speculab.bench.agreement import prefix_agreement
from speculab.bench.budget import calibrate, prompts_per_batch
from speculab.bench.divergence import divergence_fields, token_divergences
from speculab.bench.latency import request_timings
from speculab.bench.memory import machine_memory_budget, method_estimate
from speculab.bench.testbed import model_record, testbed
from speculab.bench.workload import WorkloadItem, interleave_domains, load_workload
from speculab.engine import Engine, PromptCache, sequence_length
from speculab.jsonl import read_records
from speculab.methods import MethodSpec, drafter_path, new_proposer, proposer_options
from speculab.models.linear import linear_kind
from speculab.request import Request
from speculab.sampling import LogitMargin, SamplingParams
from speculab.spec_stats import SpecStats

PROFILES = {  # quick: each batch size runs as many of the 16 prompts as fit its share of 6 minutes (budget.py)
    "quick": dict(num_prompts=16, max_tokens=64, repeats=3, prompt_cache=True, time_budget_s=360.0),
    "full": dict(num_prompts=100, max_tokens=600, repeats=3, prompt_cache=False, time_budget_s=None),
}


@dataclass(frozen=True)
class BenchConfig:
    methods: tuple[MethodSpec, ...]
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    num_prompts: int = 16
    max_tokens: int = 32
    temperature: float = 0.0
    repeats: int = 1
    seed: int = 0
    workload: str | None = None
    profile: str = "quick"
    time_budget_s: float | None = None  # in-process cells sized to it (budget.py); None: every prompt in every cell
    dtype: str | None = None
    model: str | None = None
    prompt_cache: bool = True
    endpoints: tuple = ()  # speculab.bench.over_http.endpoint.Endpoint, measured beside the in-process methods
    request_timeout: float = 600.0  # seconds, per HTTP request
    engines: tuple[str, ...] = ("speculab",)  # where the methods run: speculab in-process, and/or launched engines
    engine_python: str | None = None  # the launched engines' Python (default for vLLM: `make vllm`'s environment)
    engine_port: int = 8300  # where a launched engine listens, on 127.0.0.1

    @property
    def in_process(self) -> tuple[MethodSpec, ...]:
        return self.methods if "speculab" in self.engines else ()

    def record(self) -> dict:
        d = asdict(self)
        d["methods"] = [m.label for m in self.methods]
        d["endpoints"] = [
            {"url": e.root, "label": e.label, "served_model": e.served_model, "baseline": e.baseline} for e in self.endpoints
        ]  # never the API key
        d["method_params"] = {m.label: {"name": m.name, **m.params} for m in self.methods}
        return d


class ResultsFile:
    """``results.jsonl``: one JSON object per line, appended and flushed as results arrive."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> list[dict]:
        return read_records(self.path)

    def truncate_partial_line(self) -> None:
        """A kill mid-write leaves a line without its newline: cut it, so the next record starts clean."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def append(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


# -- memory -----------------------------------------------------------------------------------
def reset_peak_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak RSS
    except OSError:
        pass


def peak_memory() -> int:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# -- one cell ---------------------------------------------------------------------------------
def _stats(requests: list[Request], items: list[WorkloadItem]) -> dict:
    total, by_domain = SpecStats(), {}
    for r, item in zip(requests, items):
        total.merge(r.stats)
        by_domain.setdefault(item.domain, SpecStats()).merge(r.stats)
    return {
        "tau": total.mean_acceptance_length,
        "acceptance_rate": total.acceptance_rate,
        "acceptance_by_domain": {d: s.acceptance_rate for d, s in sorted(by_domain.items())},
        "tau_by_domain": {d: s.mean_acceptance_length for d, s in sorted(by_domain.items())},
        "accepted_per_position": total.accepted_per_position,
        "drafted_per_position": total.drafted_per_position,
        "reached_per_position": total.reached_per_position,
        "conditional_acceptance": total.conditional_acceptance,
        "steps": total.steps,
        "draft_tokens": total.draft_tokens,
        "accepted_tokens": total.accepted_tokens,
    }


@dataclass
class Target:
    loaded: object
    prompts: list[list[int]]
    items: list[WorkloadItem]
    cache: PromptCache | None
    baseline_outputs: dict[int, list[list[int]]] = field(default_factory=dict)  # batch size -> outputs
    baseline_margins: dict[int, list[list[LogitMargin]]] = field(default_factory=dict)  # batch size -> per prompt, per token

    def first(self, n: int) -> Target:
        """The first n prompts (the workload interleaves its domains, so they stay mixed); outputs shared."""
        return replace(self, prompts=self.prompts[:n], items=self.items[:n])


def run_once(target: Target, proposer, batch_size: int, params: list[SamplingParams], bar: tqdm | None) -> tuple[list[Request], float]:
    lm = target.loaded
    max_len = sequence_length(max(map(len, target.prompts)), max(p.max_tokens for p in params), proposer)
    engine = Engine(lm.model, batch_size, max_len, lm.tokenizer.stop_ids, proposer, target.cache)
    requests = [engine.add_request(ids, p) for ids, p in zip(target.prompts, params)]
    start = time.perf_counter()
    for r in requests:
        r.arrival_time = start  # every request arrives at once; queue_p50_s is its wait for a slot
    while engine.has_work:
        events = engine.step()
        if bar is not None:
            bar.update(sum(len(e.token_ids) for e in events))
    return requests, time.perf_counter() - start


def measure_cell(target: Target, spec: MethodSpec, options: dict, batch_size: int, cfg: BenchConfig, bar: tqdm | None) -> dict:
    # at temperature 0 each token's top-1/top-2 margin is kept: where outputs part, it tells rounding from a bug
    params = [
        SamplingParams(max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=cfg.seed + i, logit_margins=cfg.temperature == 0)
        for i in range(len(target.prompts))
    ]
    runs = []
    reset_peak_memory()
    for _ in range(cfg.repeats):
        proposer = new_proposer(spec, options)
        requests, wall = run_once(target, proposer, batch_size, params, bar)
        tokens = sum(len(r.output_ids) for r in requests)
        runs.append((tokens / wall, wall, tokens, requests))
    runs.sort(key=lambda run: run[0])
    tok_s, wall, tokens, requests = runs[len(runs) // 2]  # the median repeat
    outputs = [r.output_ids for r in requests]
    margins = [r.logit_margins for r in requests]
    if spec.name == "baseline":
        target.baseline_outputs[batch_size] = outputs
        target.baseline_margins[batch_size] = margins
    at = batch_size if batch_size in target.baseline_outputs else next(iter(target.baseline_outputs), None)
    reference = target.baseline_outputs.get(at)
    greedy = cfg.temperature == 0 and reference is not None
    return {
        "kind": "cell",
        "method": spec.name,
        "label": spec.label,
        "params": spec.params,
        "batch_size": batch_size,
        "num_prompts": len(requests),
        "repeats": cfg.repeats,
        "output_tokens": tokens,
        "wall_s": wall,
        "tok_s": tok_s,
        "tok_s_repeats": sorted(run[0] for run in runs),
        **request_timings(requests),
        **_stats(requests, target.items),
        "peak_rss_bytes": peak_memory(),
        "greedy_identical": (outputs == reference) if greedy else None,
        "agreement": prefix_agreement(outputs, reference) if greedy else None,
        **(_divergence_fields(target, outputs, reference, margins, at) if greedy and outputs != reference else {}),
        "prompt_cache": target.cache is not None,
        "stopped": sum(r.finish_reason == "stop" for r in requests),
        **({"outputs": outputs, "logit_margins": margins} if spec.name == "baseline" else {}),
    }


def _divergence_fields(target: Target, outputs, reference, margins, at: int) -> dict:
    """Where the output parts from the baseline's (at batch ``at``), both runs' margins there and the target's gap."""
    ref_margins = target.baseline_margins.get(at)
    return divergence_fields(token_divergences(target.loaded, target.prompts, outputs, reference, margins, ref_margins))


# -- the matrix -------------------------------------------------------------------------------
def _prepare(cfg: BenchConfig):
    from speculab import runtime

    loaded = runtime.load(cfg.model, cfg.dtype)
    items = interleave_domains(load_workload(cfg.workload), cfg.num_prompts)
    prompts = [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]
    return loaded, items, prompts


def _run_record(cfg: BenchConfig, run_id: str, loaded, resumed: bool, endpoints: dict) -> dict:
    memory, drafters, models = {}, {}, {}
    if loaded is not None:
        dtype_bytes = torch.finfo(loaded.model.dtype).bits // 8
        budget = machine_memory_budget()
        for spec in cfg.in_process:
            memory[spec.label] = method_estimate(spec, loaded.model.config, dtype_bytes, budget)
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
            "dtype": loaded.dtype if loaded is not None else None,
            "linear_kernels": linear_kind(loaded.model) if loaded is not None else None,
        },
        "testbed": testbed(),
        "models": models,
        "memory": memory,
        "endpoints": {info.label: asdict(info) | {"url": ep.root} for ep, info in endpoints.items()},
    }


def _sizing(cfg: BenchConfig, target: Target | None, previous_run: dict | None) -> dict:
    """The run record's ``prompts_per_batch`` (and the calibration it came from): every prompt, or as many as
    ``cfg.time_budget_s`` allows on this machine. Sized once: a resumed run keeps its first sizing."""
    if target is None:
        return {}
    if previous_run and previous_run.get("prompts_per_batch"):
        kept = {int(b): n for b, n in previous_run["prompts_per_batch"].items()}  # JSON keys are strings
        return {"prompts_per_batch": kept, "calibration_tok_s": previous_run.get("calibration_tok_s")}
    if not cfg.time_budget_s:
        return {"prompts_per_batch": {b: len(target.prompts) for b in cfg.batch_sizes}}
    lm = target.loaded
    rates = calibrate(lm.model, target.prompts, cfg.batch_sizes, lm.tokenizer.stop_ids, target.cache)
    sized = prompts_per_batch(
        rates, cfg.batch_sizes, len(cfg.in_process), cfg.max_tokens, cfg.repeats, cfg.time_budget_s, len(target.prompts)
    )
    return {"prompts_per_batch": sized, "calibration_tok_s": rates}


def _previous_references(previous: list[dict], run_id: str, target: Target | None, texts: dict) -> None:
    """A resumed run still checks greedy identity against the baselines it measured."""
    for r in previous:
        if r.get("kind") == "cell" and r.get("run_id") == run_id and r.get("method") == "baseline":
            if "outputs" in r and target is not None:
                target.baseline_outputs[r["batch_size"]] = r["outputs"]
                if r.get("logit_margins"):  # records written before margins were kept have none
                    target.baseline_margins[r["batch_size"]] = [[LogitMargin(*m) for m in ms] for ms in r["logit_margins"]]
            if "output_texts" in r:
                texts[(r.get("engine"), r["batch_size"])] = r["output_texts"]


def run_bench(cfg: BenchConfig, out: Path, resume: bool = False, progress: bool = True) -> Path:
    from speculab.bench.over_http.endpoint import measure_endpoint_cell, probe_all
    from speculab.bench.over_http.launched_engines import check_plans, engine_label, measure_engine

    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.jsonl")
    previous = results.read()
    if previous and not resume:
        raise FileExistsError(f"{results.path} exists: pass --resume to continue that run, or another --out")
    runs = [r for r in previous if r.get("kind") == "run"]
    run_id = runs[-1]["run_id"] if runs and resume else uuid.uuid4().hex[:12]
    done = {(r["label"], r["batch_size"]) for r in previous if r.get("kind") == "cell" and r.get("run_id") == run_id}
    results.truncate_partial_line()

    endpoints = probe_all(cfg.endpoints)  # a server that is down fails the run before any model loads
    launched = [e for e in cfg.engines if e != "speculab"]
    check_plans(launched, cfg, ReferenceModel(cfg, None).path, out)  # so does a method a launched engine cannot run
    loaded, items, prompts = (
        _prepare(cfg) if cfg.in_process else (None, interleave_domains(load_workload(cfg.workload), cfg.num_prompts), [])
    )
    target = Target(loaded, prompts, items, PromptCache() if cfg.prompt_cache else None) if loaded is not None else None
    texts: dict[tuple, list[str]] = {}  # (engine, batch size) -> its baseline endpoint's outputs
    _previous_references(previous, run_id, target, texts)
    specs = sorted(cfg.in_process, key=lambda s: s.name != "baseline")  # the baseline first: it is the reference
    served = sorted(endpoints.items(), key=lambda e: e[1].method != "baseline")
    # batch-major: the cells compared with each other run minutes apart at most, so a shared machine's
    # drift in speed biases a speedup less than a method-major order (all of one method, then the next)
    todo = [(s, b) for b in cfg.batch_sizes for s in [*specs, *served] if (_label(s), b) not in done]
    # each method's drafter is loaded once, for the warm-up and every cell
    options_of = {s.label: proposer_options(s, loaded) for s in specs}
    if target is not None:
        _warm_up(target, specs, options_of, progress)
    sizing = _sizing(cfg, target, runs[-1] if runs and resume else None)
    results.append(_run_record(cfg, run_id, loaded, bool(done), endpoints) | sizing)
    per_batch = sizing.get("prompts_per_batch", {})
    cells = [per_batch.get(b, len(items)) if isinstance(s, MethodSpec) else len(items) for s, b in todo]
    cells += [len(items) for e in launched for s in cfg.methods for b in cfg.batch_sizes if (engine_label(e, s), b) not in done]
    planned = sum(cells) * cfg.max_tokens * cfg.repeats
    with tqdm(total=planned, desc="bench", unit="tok", disable=not progress, smoothing=0.05) as bar:
        for what, batch_size in todo:
            bar.set_postfix_str(f"{_label(what)} b{batch_size}")
            if isinstance(what, MethodSpec):
                cell = measure_cell(target.first(per_batch[batch_size]), what, options_of[what.label], batch_size, cfg, bar) | {
                    "transport": "in-process",
                    "engine": "speculab",
                }
            else:
                endpoint, info = what
                reference = texts.get((info.engine, batch_size))
                cell = measure_endpoint_cell(endpoint, info, items, batch_size, cfg, reference, bar)
                if info.method == "baseline":
                    texts[(info.engine, batch_size)] = cell["output_texts"]
            results.append({"run_id": run_id, **cell})
        reference = ReferenceModel(cfg, loaded)
        ours = {b: [loaded.tokenizer.decode(ids) for ids in outputs] for b, outputs in target.baseline_outputs.items()} if target else {}
        for engine in launched:
            measure_engine(engine, cfg, items, reference.path, out, done, results, run_id, reference, bar, progress, ours)
    return results.path


class ReferenceModel:
    """The target in speculab's code, loaded on first use: launched engines' divergences are checked on it."""

    def __init__(self, cfg: BenchConfig, loaded):
        self.cfg, self.loaded = cfg, loaded

    @property
    def path(self) -> Path:
        if self.loaded is not None:
            return Path(self.loaded.path)
        from speculab.models.embedded import ensure_embedded_model

        return Path(self.cfg.model) if self.cfg.model else ensure_embedded_model()

    def __call__(self):
        if self.loaded is None:
            from speculab import runtime

            self.loaded = runtime.load(self.cfg.model, self.cfg.dtype)
        return self.loaded


def _label(what) -> str:
    return what.label if isinstance(what, MethodSpec) else what[1].label


def _warm_up(target: Target, specs: list[MethodSpec], options_of: dict[str, dict], progress: bool) -> None:
    """Fill the prompt cache (timed: the prefill figure of the run) with the target's and each drafter's
    prompt state, and run each method once, briefly."""
    lm = target.loaded
    if target.cache is not None:
        engine = Engine(lm.model, 1, max(map(len, target.prompts)) + 4, lm.tokenizer.stop_ids, None, target.cache)
        for ids in tqdm(target.prompts, desc="prefill (prompt cache)", unit="prompt", disable=not progress):
            engine.generate([ids], SamplingParams(max_tokens=1))
    for spec in specs:
        proposer = new_proposer(spec, options_of[spec.label])
        if target.cache is not None and proposer.prompt_cache_key is not None:
            with tqdm(total=len(target.prompts), desc=f"prefill {spec.label}", unit="prompt", disable=not progress) as bar:
                run_once(target, proposer, 1, [SamplingParams(max_tokens=1)] * len(target.prompts), bar)
            proposer = new_proposer(spec, options_of[spec.label])
        run_once(Target(lm, target.prompts[:1], target.items[:1], target.cache), proposer, 1, [SamplingParams(max_tokens=4)], None)
