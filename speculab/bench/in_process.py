"""The cells ``speculab bench`` measures in its own process: a method at a batch size on the loaded target.

Knows: the target and its prompts (their prefill shared through a prompt cache in ``--quick``), warm-up, repeats
taking turns in rounds across the methods of one batch size, or in groups beside the baseline where memory holds not
all of their engines at once (the median repeat's figures, every round's tok/s and, in groups, its group's baseline's),
fixed seeds, what a cell measures (tok/s in total and per request, TTFT, TPOT and ITL at p50 and p99, τ and acceptance
overall, per domain and per position, peak memory, greedy identity with the baseline and, where outputs part, whether
at a near-tie) and how many prompts each batch size runs under a time limit (``sizing.py``).

Does not know: the results file, HTTP cells, or how proposers work.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm

from speculab import free_memory
from speculab.bench.agreement import prefix_agreement
from speculab.bench.contexts import AS_IS, context_key
from speculab.bench.divergence import divergence_fields, token_divergences
from speculab.bench.latency import request_timings
from speculab.bench.margins import LogitMargin, MarginsByRequest
from speculab.bench.memory_fit import RoundsFit, fit_rounds
from speculab.bench.settings import BenchConfig, RunContext
from speculab.bench.sizing import calibrate, per_cell, prompts_per_batch, rate_at, rate_at_context, remembered
from speculab.bench.turns import OwnClock, Turn, take_turns
from speculab.bench.workload import WorkloadItem
from speculab.engine import Engine, engine_bytes, sequence_length
from speculab.methods import POLICY, MethodSpec, new_proposer
from speculab.prompt_cache import PromptCache
from speculab.request import Request
from speculab.runtime import LoadedModel, load
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats

TURN_S = 0.25  # seconds of its own steps each engine runs before the next takes its turn: shorter than the drift


def load_target(cfg: BenchConfig, items: list[WorkloadItem]) -> Target:
    """The target model and the workload's prompts in its chat template."""
    loaded = load(cfg.model, cfg.dtype, kv_dtype=cfg.kv_dtype)
    prompts = [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]
    return Target(loaded, prompts, items, PromptCache() if cfg.prompt_cache else None)


def with_prompts(
    target: Target, items: list[WorkloadItem], prompts: list[list[int]], prompt_cache: bool, cache: PromptCache | None = None
) -> Target:
    """The same target with other prompts (another context's), a prompt cache of their own (``cache``: one filled
    already, by a tune of the same target at this context) and no references yet."""
    return Target(target.loaded, prompts, items, (cache or PromptCache()) if prompt_cache else None)


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
        "draft_tokens": total.draft_nodes,
        "accepted_tokens": total.accepted_tokens,
    }


@dataclass
class Target:
    loaded: LoadedModel
    prompts: list[list[int]]
    items: list[WorkloadItem]
    cache: PromptCache | None
    baseline_outputs: dict[int, list[list[int]]] = field(default_factory=dict)  # batch size -> outputs
    baseline_margins: dict[int, list[list[LogitMargin]]] = field(default_factory=dict)  # batch size -> per prompt, per token

    def first(self, n: int) -> Target:
        """The first n prompts (the workload interleaves its domains, so they stay mixed); outputs shared."""
        return replace(self, prompts=self.prompts[:n], items=self.items[:n])


def start_run(
    target: Target, proposer, batch_size: int, params: list[SamplingParams], bar: tqdm | None, margins: MarginsByRequest | None = None
) -> Turn:
    """Every prompt queued on a fresh engine at ``batch_size``, on its own clock, not yet stepped; ``margins`` collects
    each output token's logit margin (margins.py)."""
    lm, clock = target.loaded, OwnClock()
    max_len = sequence_length(max(map(len, target.prompts)), max(p.max_tokens for p in params), proposer)
    engine = Engine(
        lm.model, batch_size, max_len, lm.tokenizer.stop_ids, proposer, target.cache, token_logits=margins is not None, clock=clock
    )
    # the clock stands still until the first turn: every request arrives at once, queue_p50_s is its wait for a slot
    requests = [engine.add_request(ids, p) for ids, p in zip(target.prompts, params)]
    return Turn(engine, requests, clock, margins, bar, started=clock())


def run_once(
    target: Target, proposer, batch_size: int, params: list[SamplingParams], bar: tqdm | None, margins: MarginsByRequest | None = None
) -> tuple[list[Request], float]:
    """Every prompt through one engine at ``batch_size``, alone: (the requests, seconds)."""
    turn = start_run(target, proposer, batch_size, params, bar, margins)
    take_turns([turn])
    return turn.requests, turn.elapsed


@dataclass
class Repeat:
    """One run of a cell's prompts: its rate, its requests and (greedy) each token's logit margins."""

    tok_s: float
    wall_s: float
    tokens: int
    requests: list[Request]
    margins: list[list[LogitMargin]]
    peak_rss_bytes: int | None  # None: run in turns beside other engines


def sampling_params(target: Target, cfg: BenchConfig) -> list[SamplingParams]:
    """Each prompt's sampling parameters: the run's temperature, a fixed seed per prompt (the same every repeat)."""
    return [
        SamplingParams(max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=cfg.seed + i, sampling_verify=cfg.sampling_verify)
        for i in range(len(target.prompts))
    ]


def run_repeat(target: Target, spec: MethodSpec, options: dict, batch_size: int, cfg: BenchConfig, bar: tqdm | None) -> Repeat:
    """One repeat of a cell alone: every prompt through a fresh proposer at ``batch_size``; its peak memory."""
    reset_peak_memory()
    turn = start_run(target, new_proposer(spec, options), batch_size, sampling_params(target, cfg), bar, new_margins(cfg))
    take_turns([turn])
    return finished_repeat(turn, peak_memory())


def new_margins(cfg: BenchConfig) -> MarginsByRequest | None:
    # at temperature 0 each token's logit margins are kept: where outputs part, they tell rounding from a bug
    return MarginsByRequest() if cfg.temperature == 0 else None


def finished_repeat(turn: Turn, peak_rss_bytes: int | None) -> Repeat:
    tokens = sum(len(r.output_ids) for r in turn.requests)
    kept = turn.margins.of(turn.requests) if turn.margins is not None else [[] for _ in turn.requests]
    return Repeat(tokens / turn.elapsed, turn.elapsed, tokens, turn.requests, kept, peak_rss_bytes)


def round_in_turns(
    target: Target, specs: list[MethodSpec], options_of: dict[str, dict], batch_size: int, cfg: BenchConfig, bar: tqdm | None
) -> list[Repeat]:
    """One repeat of every cell of ``specs``, their engines taking turns of ``TURN_S`` of their own time (turns.py):
    a drift in the machine's speed reaches them all within a fraction of a second. No peak memory: all are alive."""
    params = sampling_params(target, cfg)
    turns = [start_run(target, new_proposer(s, options_of[s.label]), batch_size, params, bar, new_margins(cfg)) for s in specs]
    take_turns(turns, TURN_S)
    return [finished_repeat(t, None) for t in turns]


def measure_in_rounds(
    target: Target,
    specs: list[MethodSpec],
    options_of: dict[str, dict],
    batch_size: int,
    cfg: BenchConfig,
    run: RunContext,
    fit: RoundsFit | None = None,
) -> list[dict]:
    """The cells of ``specs`` at one batch size in rounds. The first round runs each method alone, one after another
    (its peak memory); in the later ones their engines take turns of ``TURN_S`` as ``fit`` (``memory_fit``) allows:
    all at once (None, or ``fit.in_turns``); in ``fit.groups``, one group after another, each the baseline and the
    methods that fit beside it taking turns; else each alone, as the first round runs. A method's per-round ratio to
    the baseline of its round (of its group: ``baseline_tok_s_by_round``) cancels the machine's drift, and the median
    ratio lies between two rounds taken in turns. Each cell's record (baseline first), once every round has run.

    In groups the baseline runs once in every group of a round, but its own cell keeps one run a round: its run in the
    first group (its ``tok_s_by_round``, and its median repeat's outputs, greedy identity's reference as ever). Its
    runs in the other groups are timed only as their methods' ``baseline_tok_s_by_round``."""
    groups = turn_groups(specs, fit)
    base = baseline_label(specs)
    repeats: dict[str, list[Repeat]] = {s.label: [] for s in specs}
    paired: dict[str, list[float]] = {s.label: [] for s in specs if s.label != base}  # method -> its round's baseline tok/s
    for round_index in range(cfg.repeats):
        if round_index and groups:
            for n, group in enumerate(groups):
                where = f", group {n + 1}/{len(groups)}" if len(groups) > 1 else ""
                run.show(f"b{batch_size} round {round_index + 1}/{cfg.repeats}, in turns{where}")
                ran = dict(zip([s.label for s in group], round_in_turns(target, group, options_of, batch_size, cfg, run.bar)))
                for label, repeat in ran.items():
                    if label != base or n == 0:
                        repeats[label].append(repeat)
                    if label != base and base in ran:
                        paired[label].append(ran[base].tok_s)
            continue
        for spec in specs:
            run.show(f"b{batch_size} round {round_index + 1}/{cfg.repeats} {spec.label}")
            repeats[spec.label].append(run_repeat(target, spec, options_of[spec.label], batch_size, cfg, run.bar))
        if base is not None:
            for label in paired:
                paired[label].append(repeats[base][-1].tok_s)
    # one group is every engine in turns: the baseline cell's own rounds are every method's, as in older results
    by_group = paired if len(groups) > 1 and base is not None else {}
    return [
        cell_record(target, s, options_of[s.label], repeats[s.label], batch_size, cfg, bool(groups), by_group.get(s.label)) for s in specs
    ]


def baseline_label(specs: list[MethodSpec]) -> str | None:
    """The baseline's label among ``specs`` (None: no baseline is measured here)."""
    return next((s.label for s in specs if s.name == "baseline"), None)


def turn_groups(specs: list[MethodSpec], fit: RoundsFit | None) -> list[list[MethodSpec]]:
    """The engines that take turns together in a later round, group by group: all of ``specs`` (no fit, or all fit
    at once); the fit's groups, of those in ``specs``; none where each runs alone."""
    if fit is None or fit.in_turns:
        return [specs]
    by_label = {s.label: s for s in specs}
    groups = [[by_label[label] for label in g if label in by_label] for g in fit.groups]
    return [g for g in groups if g]


def rounds_fit(target: Target, specs: list[MethodSpec], options_of: dict[str, dict], batch_size: int, cfg: BenchConfig) -> RoundsFit:
    """How the rounds of ``specs`` at ``batch_size`` fit in the memory free now (``memory_fit``)."""
    longest, lm = max(map(len, target.prompts)), target.loaded
    needed = {}
    for spec in specs:
        proposer = new_proposer(spec, options_of[spec.label])
        needed[spec.label] = engine_bytes(lm.model, batch_size, sequence_length(longest, cfg.max_tokens, proposer), proposer)
    cached = target.cache.nbytes if target.cache is not None else 0
    base = baseline_label(specs)
    return fit_rounds(needed, free_memory.available_bytes(lm.model.norm.weight.device), cached, base)


def cell_record(
    target: Target,
    spec: MethodSpec,
    options: dict,
    repeats: list[Repeat],
    batch_size: int,
    cfg: BenchConfig,
    in_turns: bool = True,
    baseline_tok_s_by_round: list[float] | None = None,
) -> dict:
    """A cell's record from its repeats, in the order they ran (``tok_s_by_round``): the median repeat's figures, and
    greedy identity with the baseline's outputs at this batch size (a baseline's own outputs become that reference);
    ``baseline_tok_s_by_round``: the baseline's tok/s each round where the rounds ran in groups (its group's run)."""
    median = sorted(repeats, key=lambda r: r.tok_s)[len(repeats) // 2]
    requests, margins = median.requests, median.margins
    outputs = [r.output_ids for r in requests]
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
        "repeats": len(repeats),
        "output_tokens": median.tokens,
        "wall_s": median.wall_s,
        "tok_s": median.tok_s,
        "tok_s_repeats": sorted(r.tok_s for r in repeats),
        "tok_s_by_round": [r.tok_s for r in repeats],
        **({"baseline_tok_s_by_round": baseline_tok_s_by_round} if baseline_tok_s_by_round is not None else {}),
        **request_timings(requests),
        **_stats(requests, target.items),
        "peak_rss_bytes": max((r.peak_rss_bytes for r in repeats if r.peak_rss_bytes is not None), default=None),
        "turn_s": TURN_S if len(repeats) > 1 and in_turns else None,  # the later rounds' turns (measure_in_rounds)
        "greedy_identical": (outputs == reference) if greedy else None,
        "agreement": prefix_agreement(outputs, reference) if greedy else None,
        **(_divergence_fields(target, outputs, reference, margins, at) if greedy and outputs != reference else {}),
        "prompt_cache": target.cache is not None,
        "policy": options[POLICY].to_dict() if POLICY in options else None,  # the policy's rules: named, a file's or auto's
        "stopped": sum(r.finish_reason == "stop" for r in requests),
        **({"outputs": outputs, "logit_margins": margins} if spec.name == "baseline" else {}),
    }


def _divergence_fields(target: Target, outputs, reference, margins, at: int) -> dict:
    """Where the output parts from the baseline's (at batch ``at``), both runs' margins there and the target's gap."""
    ref_margins = target.baseline_margins.get(at)
    return divergence_fields(token_divergences(target.loaded, target.prompts, outputs, reference, margins, ref_margins))


def sizing(cfg: BenchConfig, target: Target | None, previous_run: dict | None, prompts) -> dict:
    """The run record's ``prompts_per_cell`` (context key -> batch size -> prompts; ``prompts``: the run's
    contexts.PromptsByContext, the target holding the first context's now) and the calibration it came from: every
    prompt, or as many as ``cfg.time_limit_s`` allows on this machine. Sized once: a resumed run keeps its first sizing
    (a run written before contexts were measured sized the workload's own, ``prompts_per_batch``), and a new run takes
    the sizing an earlier run on this machine with the same settings chose (``sizing.remembered``)."""
    if target is None:
        return {}
    if previous_run and (previous_run.get("prompts_per_cell") or previous_run.get("prompts_per_batch")):
        kept = previous_run.get("prompts_per_cell") or {AS_IS: previous_run["prompts_per_batch"]}
        return {"prompts_per_cell": per_cell(kept), "calibration_tok_s": previous_run.get("calibration_tok_s")}
    keys = {context_key(c): c for c in prompts.contexts}
    if not cfg.time_limit_s:
        return {"prompts_per_cell": {k: {b: len(target.prompts) for b in prompts.batch_sizes[c]} for k, c in keys.items()}}
    lm = target.loaded
    everywhere = tuple(sorted({b for sizes in prompts.batch_sizes.values() for b in sizes}))
    rates = calibrate(lm.model, target.prompts, everywhere, lm.tokenizer.stop_ids, target.cache)
    measured_at = prompts.median_of(prompts.contexts[0])
    cells = sum(len(sizes) for sizes in prompts.batch_sizes.values())  # the limit's equal shares: one a cell of methods
    languages = len({item.domain for item in target.items})  # a prompt of each at least
    sized = {}
    for key, context in keys.items():
        sizes, tokens = prompts.batch_sizes[context], prompts.median_of(context)
        scaled = {b: rate_at_context(rate_at(rates, b), b, lm.model, measured_at, tokens) for b in sizes}
        share_s = cfg.time_limit_s * len(sizes) / cells
        sized[key] = prompts_per_batch(
            scaled, sizes, len(cfg.in_process), cfg.max_tokens, cfg.repeats, share_s, len(target.prompts), least=languages
        )
    sized, reused = remembered(cfg.measured() | {"model_path": str(lm.path), "num_items": len(target.prompts)}, sized)
    return {"prompts_per_cell": sized, "calibration_tok_s": rates, "calibration_prompt_tokens": measured_at, "sizing_reused": reused}


def warm_up(target: Target, specs: list[MethodSpec], options_of: dict[str, dict], progress: bool, what: str = "") -> None:
    """Fill the prompt cache (timed: the prefill figure of the run) with the target's and each drafter's
    prompt state, and run each method once, briefly; ``what``: the prompts' context, for the progress bars."""
    lm = target.loaded
    if target.cache is not None:
        engine = Engine(lm.model, 1, max(map(len, target.prompts)) + 4, lm.tokenizer.stop_ids, None, target.cache)
        for ids in tqdm(target.prompts, desc=f"prefill (prompt cache){what}", unit="prompt", disable=not progress):
            engine.generate([ids], SamplingParams(max_tokens=1))
    for spec in specs:
        proposer = new_proposer(spec, options_of[spec.label])
        if target.cache is not None and proposer.prompt_cache_key is not None:
            with tqdm(total=len(target.prompts), desc=f"prefill {spec.label}{what}", unit="prompt", disable=not progress) as bar:
                run_once(target, proposer, 1, [SamplingParams(max_tokens=1)] * len(target.prompts), bar)
            proposer = new_proposer(spec, options_of[spec.label])
        run_once(Target(lm, target.prompts[:1], target.items[:1], target.cache), proposer, 1, [SamplingParams(max_tokens=4)], None)
