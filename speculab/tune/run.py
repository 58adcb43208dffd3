"""One tuning, end to end: load, sweep, model, check, store. Knows the order; each step is another module's."""

from __future__ import annotations

import argparse
import json
import math

from speculab.bench.workload import interleave_domains, load_workload
from speculab.free_memory import MemoryShortfall
from speculab.methods import POLICY, new_proposer, parse_method, proposer_options, without_policy
from speculab.models.linear import linear_kind
from speculab.policy.store import machine_id, tuned_paths
from speculab.policy.table import SpeculationPolicy
from speculab.runtime import load
from speculab.testbed import testbed
from speculab.tune.cost_model import CostModel
from speculab.tune.engine_settings import engine_settings
from speculab.tune.measure import Tuning, check, sweep, warm_prompt_cache

# a drafter that learns from earlier outputs (suffix decoding's shared tree) would learn a prompt's output the first
# time and draft it perfectly the next: its runs take prompts that do not repeat (a 16-request batch needs about 100)
DISTINCT_PROMPTS = 124
# what `speculab tune --method M` measures by default (its flags' defaults, and what `speculab bench` tunes with)
BATCH_SIZES = (1, 2, 4, 8, 16)
NUM_PROMPTS, MAX_TOKENS, CHECK_STEPS = 12, 48, 24


def tuning(args: argparse.Namespace) -> Tuning:
    spec = parse_method(args.method)
    if POLICY not in spec.params:
        raise ValueError(f"--method {spec.name}: nothing to tune, it drafts nothing")
    if spec.params[POLICY] not in (None, spec.method.defaults[POLICY]):
        raise ValueError("--method: tune chooses the policy; name the method without one")
    spec = without_policy(spec)  # the sweep sets every budget itself, up to all the method drafts
    loaded = load(args.model, args.dtype, args.device, args.kv_dtype)
    options = proposer_options(spec, loaded)
    wanted = args.num_prompts
    if new_proposer(spec, options).learns_across_requests:
        wanted = max(wanted, DISTINCT_PROMPTS)
    items = interleave_domains(load_workload(args.workload), wanted)
    prompts = [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]
    return Tuning(loaded, spec, options, prompts, [i.domain for i in items], args.max_tokens, not args.quiet)


def below_plain(model: CostModel, batch_size: int, checked: dict) -> bool:
    """The checked policy falls below plain decoding's prediction at this batch size, beyond both spreads: the check
    then sends the batch size to plain decoding."""
    plain = model.cell(batch_size, 0)
    return checked["tok_s"] + math.hypot(checked["tok_s_se"], plain.predicted_se) < plain.predicted_tok_s


def tune_with_defaults(
    method: str, *, model: str, dtype: str, device: str, kv_dtype: str | None, workload: str | None, quiet: bool
) -> dict:
    """``speculab tune --method METHOD`` on this target with every other setting at its default; its record."""
    settings = dict(batch_sizes=list(BATCH_SIZES), num_prompts=NUM_PROMPTS, max_tokens=MAX_TOKENS, check_steps=CHECK_STEPS, out=None)
    target = dict(model=model, dtype=dtype, device=device, kv_dtype=kv_dtype, workload=workload, quiet=quiet)
    return tune(argparse.Namespace(method=method, **target, **settings))


def tune(args: argparse.Namespace) -> dict:
    t = tuning(args)
    proposer = t.proposer()
    budgets = list(range(proposer.max_draft_tokens + 1))
    cache = warm_prompt_cache(t)
    steps = sweep(t, cache, args.batch_sizes, budgets)
    if not steps:
        raise MemoryShortfall("; ".join(t.skipped.values()) or "the sweep measured no step")
    model = CostModel.from_steps(steps, chains=proposer.prefix_chains)
    chosen = {b: model.best(b).budget for b in model.batch_sizes()}
    checked = check(t, cache, model.batch_sizes(), model.policy(), args.check_steps) if args.check_steps else {}
    for b, c in checked.items():
        c["predicted_tok_s"] = model.best(b).predicted_tok_s
        c["error"] = c["tok_s"] / c["predicted_tok_s"] - 1 if c["predicted_tok_s"] else None
    corrected = [b for b, c in checked.items() if chosen[b] and below_plain(model, b, c)]
    policy = SpeculationPolicy.by_batch_size({b: 0 if b in corrected else budget for b, budget in chosen.items()})
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
        "batch_sizes": args.batch_sizes,
        "num_prompts": len(t.prompts),
        "max_tokens": t.max_tokens,
        "cost_model": model.to_dict(),
        "chosen": {str(b): budget for b, budget in chosen.items()},
        "corrected": corrected,
        "skipped_batch_sizes": {str(b): why for b, why in t.skipped.items()},  # memory could not hold their engines
        "policy": policy.to_dict(),
        "check": {str(b): c for b, c in checked.items()},
        "engines": engine_settings(t.spec, policy_path),
    }
    costs_path.write_text(json.dumps(record, indent=1) + "\n")
    if args.out is not None:
        args.out.write_text(json.dumps(policy.to_dict(), indent=1) + "\n")
    return record | {"policy_file": str(policy_path), "costs_file": str(costs_path)}
