"""The bench's acceptance pass: each speculative method's acceptance by language on enough prompts, untimed.

Knows: acceptance needs no timing, so it is measured where it costs least: every method greedy over the first
``PER_DOMAIN`` prompts of each domain of the workload (12 each: Python, TypeScript, SQL, agentic), ``BATCH`` at a time
(fewer where memory holds no engine of 16), after the timed cells. In fp32 a request's tokens do not depend on its
batch, so neither do its drafts; a method runs here with its whole draft, its speculation policy left out (a policy
only ever shortens a draft, so an acceptance per position holds under any policy; the figures are batch 1's for every
policy that leaves the whole draft at batch 1, EAGLE's default among them). Suffix decoding's shared tree does see the
other requests' outputs, as it would on a server. Each domain's row carries its prompt count. Two methods that draft alike here (an
auto row and its fixed method) share one pass (``same_pass_as``).

Does not know: the timed cells (``in_process.py``) or the report (``report/acceptance_section.py``).
"""

from __future__ import annotations

from tqdm import tqdm

from speculab import free_memory
from speculab.bench.in_process import Target, run_once
from speculab.bench.settings import ACCEPTANCE, RunContext
from speculab.bench.workload import WorkloadItem, interleave_domains, load_workload
from speculab.engine import engine_bytes, sequence_length
from speculab.free_memory import usable_bytes
from speculab.methods import POLICY, MethodSpec, new_proposer, without_policy
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats

PER_DOMAIN = 12
BATCH = 16


def pass_items(items: list[WorkloadItem]) -> list[WorkloadItem]:
    """The first PER_DOMAIN prompts of each domain (all of a domain that has fewer), domains in turn."""
    kept, seen = [], {}
    for item in items:
        if seen.get(item.domain, 0) < PER_DOMAIN:
            kept.append(item)
            seen[item.domain] = seen.get(item.domain, 0) + 1
    return interleave_domains(kept, len(kept))


def run_acceptance_pass(target: Target, specs: list[MethodSpec], options_of: dict[str, dict], run: RunContext) -> None:
    """Every speculative spec not yet measured in this run (a resumed run skips the done ones), one record each."""
    todo = [s for s in specs if s.name != "baseline" and run.state.pending(s.label, ACCEPTANCE)]
    if not todo:
        return
    items = pass_items(load_workload(run.cfg.workload))
    lm = target.loaded
    prompts = [lm.tokenizer.encode_chat(item.message_dicts()) for item in items]
    passed = Target(lm, prompts, items, target.cache)
    total = len(todo) * len(items) * run.cfg.max_tokens
    measured: dict[str, dict] = {}  # drafted_as -> its record: an auto row drafts here as its fixed method does
    with tqdm(total=total, desc="acceptance pass (untimed)", unit="tok", disable=not run.progress, smoothing=0.05) as bar:
        for spec in todo:
            bar.set_postfix_str(spec.label)
            drafted_as = as_at_batch_one(spec).text
            same = measured.get(drafted_as)
            if same is None:
                record = measured[drafted_as] = measure_acceptance(passed, spec, options_of[spec.label], run.cfg.max_tokens, bar)
            else:
                record = same | {"method": spec.name, "label": spec.label, "same_pass_as": same["label"]}
                bar.update(len(items) * run.cfg.max_tokens)
            run.write(record)


def as_at_batch_one(spec: MethodSpec) -> MethodSpec:
    """The spec with its whole draft: without its policy (which only shortens drafts)."""
    return without_policy(spec)


def measure_acceptance(target: Target, spec: MethodSpec, options: dict, max_tokens: int, bar: tqdm | None) -> dict:
    """One method over the pass's prompts: acceptance and τ by domain, with the prompts each counts."""
    batch_one = as_at_batch_one(spec)
    # the options were built from the spec as the cells run it: its policy (a file's or auto's) is in them
    options = {k: v for k, v in options.items() if k != POLICY}
    params = [SamplingParams(max_tokens=max_tokens)] * len(target.prompts)
    proposer = new_proposer(batch_one, options)
    batch = batch_that_fits(target, proposer, max_tokens)
    requests, _ = run_once(target, proposer, batch, params, bar)
    by_domain: dict[str, SpecStats] = {}
    prompts: dict[str, int] = {}
    for r, item in zip(requests, target.items, strict=True):
        by_domain.setdefault(item.domain, SpecStats()).merge(r.stats)
        prompts[item.domain] = prompts.get(item.domain, 0) + 1
    total = SpecStats()
    for stats in by_domain.values():
        total.merge(stats)
    return {
        "kind": ACCEPTANCE,
        "method": spec.name,
        "label": spec.label,
        "drafted_as": batch_one.text,
        "batch_size": batch,
        "max_tokens": max_tokens,
        "by_domain": {d: _figures(s, prompts[d]) for d, s in sorted(by_domain.items())},
        "all": _figures(total, len(requests)),
    }


def batch_that_fits(target: Target, proposer, max_tokens: int) -> int:
    """``BATCH``, or the largest of its halves whose engine fits in the memory free now (the figures do not depend on
    it: fp32 drafts do not depend on the batch)."""
    model, batch = target.loaded.model, BATCH
    length = sequence_length(max(map(len, target.prompts)), max_tokens, proposer)
    free = usable_bytes(free_memory.available_bytes(model.norm.weight.device))
    while batch > 1 and engine_bytes(model, batch, length, proposer) > free:
        batch //= 2
    return batch


def _figures(stats: SpecStats, prompts: int) -> dict:
    return {
        "prompts": prompts,
        "acceptance_rate": stats.acceptance_rate,
        "tau": stats.mean_acceptance_length,
        "drafted_depth": stats.drafted_depth,
        "accepted_tokens": stats.accepted_tokens,
        "steps": stats.steps,
    }
