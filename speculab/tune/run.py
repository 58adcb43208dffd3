"""One tuning, end to end: load, then at each context sweep, model, choose and check; one policy; store. Knows the
order; each step is another module's (the contexts and their policy: ``contexts.py``)."""

from __future__ import annotations

import argparse
import json
import math

from speculab.bench.workload import interleave_domains, load_workload
from speculab.engine import sequence_length
from speculab.free_memory import MemoryShortfall
from speculab.methods import POLICY, new_proposer, parse_method, proposer_options, without_policy
from speculab.models.linear import linear_kind
from speculab.policy.store import machine_id, tuned_paths
from speculab.runtime import load
from speculab.testbed import testbed
from speculab.tune.contexts import WORKLOAD_ONLY, TuneContext, build_contexts, context_policy, thresholds, tuned_contexts
from speculab.tune.cost_model import CostModel
from speculab.tune.engine_settings import engine_settings
from speculab.tune.measure import Tuning, check, sweep, warm_prompt_cache

# a drafter that learns from earlier outputs (suffix decoding's shared tree) would learn a prompt's output the first
# time and draft it perfectly the next: its runs take prompts that do not repeat (a 16-request batch needs about 100)
DISTINCT_PROMPTS = 124
# what `speculab tune --method M` measures by default (its flags' defaults, and what `speculab bench` tunes with)
BATCH_SIZES = (1, 2, 4, 8, 16)
NUM_PROMPTS, MAX_TOKENS, CHECK_STEPS = 12, 48, 24


def tuning(args: argparse.Namespace) -> tuple[Tuning, list[TuneContext]]:
    """The target and method, and the contexts to measure with their prompts (``args.contexts``: (context, its batch
    sizes or None for ``args.batch_sizes``) pairs, as ``contexts.parse_contexts`` gives them; absent: the workload's
    own)."""
    spec = parse_method(args.method)
    if POLICY not in spec.params:
        raise ValueError(f"--method {spec.name}: nothing to tune, it drafts nothing")
    if spec.params[POLICY] not in (None, spec.method.defaults[POLICY]):
        raise ValueError("--method: tune chooses the policy; name the method without one")
    spec = without_policy(spec)  # the sweep sets every budget itself, up to all the method drafts
    loaded = load(args.model, args.dtype, args.device, args.kv_dtype)
    options = proposer_options(spec, loaded)
    proposer = new_proposer(spec, options)
    wanted = args.num_prompts
    if proposer.learns_across_requests:
        wanted = max(wanted, DISTINCT_PROMPTS)
    items = interleave_domains(load_workload(args.workload), wanted)
    room = sequence_length(0, args.max_tokens, proposer)  # a request's positions after its prompt
    asked = getattr(args, "contexts", None) or WORKLOAD_ONLY
    contexts = build_contexts(asked, args.batch_sizes, loaded, items, room, distinct=proposer.learns_across_requests)
    first = contexts[0]
    return Tuning(loaded, spec, options, first.prompts, first.domains, args.max_tokens, not args.quiet), contexts


def below_plain(model: CostModel, batch_size: int, checked: dict) -> bool:
    """The checked policy falls below plain decoding's prediction at this batch size, beyond both spreads: the check
    then sends the batch size to plain decoding."""
    plain = model.cell(batch_size, 0)
    return checked["tok_s"] + math.hypot(checked["tok_s_se"], plain.predicted_se) < plain.predicted_tok_s


def tune_with_defaults(
    method: str,
    *,
    model: str,
    dtype: str,
    device: str,
    kv_dtype: str | None,
    workload: str | None,
    quiet: bool,
    contexts: tuple = WORKLOAD_ONLY,
    caches: dict | None = None,
) -> dict:
    """``speculab tune --method METHOD`` on this target with every other setting at its default; its record.
    ``contexts``: (context, its batch sizes or None for the defaults) pairs, as ``--contexts`` gives them (a bench run
    hands down its own: ``bench/auto_policy.py``); ``caches``: each context's prompt cache is left there, under its
    key, for the bench run that prefills the same prompts next (None: dropped after its context)."""
    settings = dict(batch_sizes=list(BATCH_SIZES), num_prompts=NUM_PROMPTS, max_tokens=MAX_TOKENS, check_steps=CHECK_STEPS, out=None)
    target = dict(model=model, dtype=dtype, device=device, kv_dtype=kv_dtype, workload=workload, quiet=quiet)
    return tune(argparse.Namespace(method=method, **target, **settings, contexts=tuple(contexts), keep_caches=caches))


def measure_context(
    t: Tuning, context: TuneContext, budgets: list[int], check_steps: int, chains: bool, kept: dict | None = None
) -> tuple[dict, dict[int, int]]:
    """One context's sweep, cost model, choice and check: its part of the record, and its budget at each batch size
    measured (a batch size the check measures below plain decoding goes to plain decoding). ``kept``: where its prompt
    cache is left, under the context's key, for a caller that prefills the same prompts next (a bench run)."""
    cache = warm_prompt_cache(t)
    if kept is not None:
        kept[context.key] = cache
    steps = sweep(t, cache, list(context.batch_sizes), budgets)
    if not steps:
        at = f"at {context.label()}: " if t.at else ""
        raise MemoryShortfall(at + ("; ".join(t.skipped.values()) or "the sweep measured no step"))
    model = CostModel.from_steps(steps, chains=chains)
    chosen = {b: model.best(b).budget for b in model.batch_sizes()}
    # the check runs this context's own rules: its requests' lengths lie past its threshold and short of the next one's
    checked = check(t, cache, model.batch_sizes(), model.policy(), check_steps) if check_steps else {}
    for b, c in checked.items():
        c["predicted_tok_s"] = model.best(b).predicted_tok_s
        c["error"] = c["tok_s"] / c["predicted_tok_s"] - 1 if c["predicted_tok_s"] else None
    corrected = [b for b, c in checked.items() if chosen[b] and below_plain(model, b, c)]
    part = {
        "batch_sizes": list(context.batch_sizes),
        "num_prompts": len(t.prompts),
        "cost_model": model.to_dict(),
        "chosen": {str(b): budget for b, budget in chosen.items()},
        "corrected": corrected,
        "skipped_batch_sizes": {str(b): why for b, why in t.skipped.items()},  # memory could not hold their engines
        "check": {str(b): c for b, c in checked.items()},
    }
    return part, {b: 0 if b in corrected else budget for b, budget in chosen.items()}


def tune(args: argparse.Namespace) -> dict:
    t, contexts = tuning(args)
    proposer = t.proposer()
    budgets = list(range(proposer.max_draft_tokens + 1))
    parts, tables = {}, {}
    kept = args.keep_caches  # a bench run's, or None: `speculab tune` drops each context's prompt cache
    for context in contexts:
        # each context's prompt cache is dropped before the next one's is filled (its bytes come back), unless the
        # caller keeps them (keep_caches: a bench run, which prefills the same prompts next)
        at = f" at {context.label()}" if len(contexts) > 1 else ""
        at_context = t.with_prompts(context.prompts, context.domains, at)
        parts[context.key], tables[context.key] = measure_context(
            at_context, context, budgets, args.check_steps, proposer.prefix_chains, kept
        )
    starts = thresholds(contexts)
    policy = context_policy(tables, starts, tuned_contexts(contexts))
    lm = t.loaded
    policy_path, costs_path = tuned_paths(lm, t.spec.text)
    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_text(json.dumps(policy.to_dict(), indent=1) + "\n")
    record = {
        "method": t.spec.label,
        "spec": t.spec.text,
        "model": lm.path.name,
        "dtype": lm.dtype,
        "kv_dtype": lm.kv_dtype,
        "linear_kernels": linear_kind(lm.model),
        "machine_id": machine_id(),
        "testbed": testbed(),
        "budgets": budgets,
        "max_tokens": t.max_tokens,
    }
    if policy.tuned_contexts:  # each context's part under its key, with its prompts' length and its rules' threshold
        record["contexts"] = {
            c.key: {"context_len": c.context_len, "context_tokens": c.median_tokens, "from_context_len": starts[c.key]} | parts[c.key]
            for c in contexts
        }
    else:  # the workload's own alone: the record as it was before a tune took contexts
        record |= parts[contexts[0].key]
    record |= {"policy": policy.to_dict(), "engines": engine_settings(t.spec, policy_path)}
    costs_path.write_text(json.dumps(record, indent=1) + "\n")
    if args.out is not None:
        args.out.write_text(json.dumps(policy.to_dict(), indent=1) + "\n")
    return record | {"policy_file": str(policy_path), "costs_file": str(costs_path)}
