"""SGLang's command line for a speculab method, by SGLang version.

Knows (sources: SGLang's ``srt/server_args.py`` of each release, recorded in
``tests/launch/fixtures/``, and the study's ERRATA.md), what is not one method's (each method's algorithm, the
version it arrived in, its draft's shape and drafter layout are its entry's ``sglang`` in ``methods.METHODS``):
- the full flag names: ``--speculative-draft-model-path`` (``--speculative-draft`` was only an
  argparse prefix), and ``--speculative-num-steps``, ``--speculative-eagle-topk``,
  ``--speculative-num-draft-tokens`` given together, as SGLang's docs ask;
- ``--speculative-token-map`` for a reduced draft vocabulary (FR-Spec), a file of the kept token ids
  (``speculab export --for sglang`` writes it);
- ``--speculative-adaptive`` with its config file (from 0.5.23) for a speculation policy's budgets by batch size
  (``policy.engines.sglang_budget``, the one translation); what SGLang cannot express is refused, the method's
  default policy left out with a note;
- ``--enable-metrics``: without it SGLang has no ``/metrics``.

SGLang has no CPU build: speculab writes its commands and starts them from a Python the user names;
they are checked against the recorded parsers, not run here.

Does not know: how a process is run (``server.py``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from packaging.version import Version

from speculab.launch.command import Flag, LaunchCommand, LaunchRequest, UnsupportedLaunch, launch_policy, policy_shortfall, served_flags
from speculab.methods import MethodSpec, chain_length, draft_nodes
from speculab.policy.engines import SglangBudget, sglang_budget

ADAPTIVE_FROM = Version("0.5.23")  # the first recorded parser with --speculative-adaptive (absent in 0.5.3)
NEWEST_KNOWN = Version("0.5.23")
ADAPTIVE_CONFIG = "sglang-adaptive-{digest}.json"  # one a spec: launches of several methods share a run folder


def _drafter(req: LaunchRequest) -> str:
    if req.drafter is None:
        raise UnsupportedLaunch(f"--method {req.spec.name} needs a drafter folder (--draft)")
    return str(req.drafter)


def _shape(spec: MethodSpec, budget: SglangBudget | None) -> list[Flag]:
    """The draft's shape: steps, branches and tokens verified (given together, as SGLang's docs ask), or the tokens
    alone for a lookup; under a budget of n nodes a tree narrowed as speculab's drafter narrows it (``tree_shape``)."""
    on, p = spec.method.sglang, spec.params
    if budget is not None and budget.adaptive:
        steps, topk, tokens = budget.steps, 1, budget.steps + 1
    elif on.shape == "tree":
        steps, topk, tokens = p["num_steps"], p["topk"], p["num_draft_tokens"]
        if budget is not None and budget.steps < tokens - 1:
            steps, topk, tokens = min(steps, budget.steps), min(topk, budget.steps), budget.steps + 1
    else:
        k = budget.steps if budget is not None else chain_length(spec)
        steps, topk, tokens = k, 1, k + 1
    if on.shape == "lookup":
        return [Flag("--speculative-num-draft-tokens", str(tokens), "tokens verified per step, the root included")]
    return [
        Flag("--speculative-num-steps", str(steps), "draft depth"),
        Flag("--speculative-eagle-topk", str(topk), "branches kept per step (1: a chain)"),
        Flag("--speculative-num-draft-tokens", str(tokens), "tokens verified per step; SGLang wants all three set together"),
    ]


def _speculative_flags(req: LaunchRequest) -> tuple[list[Flag], list[str], tuple]:
    """The method's flags, the notes they add, and the files the command needs ((path, text): the adaptive config)."""
    spec = req.spec
    on = spec.method.sglang
    if on is None:
        raise UnsupportedLaunch(f"--method {spec.name}: {spec.method.sglang_missing or 'SGLang has no such algorithm'}")
    if req.version < Version(on.since):
        raise UnsupportedLaunch(f"SGLang {req.version} has no --speculative-algorithm {on.algorithm}: it arrived in {on.since}")
    budget, notes = _budget(req)
    if budget is not None and budget.plain:
        return [], [*notes, "the policy decodes plainly at every batch size: no --speculative-algorithm"], ()
    flags = [Flag("--speculative-algorithm", on.algorithm, on.drafts_with)]
    if spec.method.drafter:
        flags.append(Flag("--speculative-draft-model-path", _drafter(req), "the drafter, exported (speculab export --for sglang)"))
    flags += _shape(spec, budget)
    if on.lookup_windows_until and req.version < Version(on.lookup_windows_until):
        flags += [
            Flag("--speculative-ngram-min-match-window-size", str(spec.params["prompt_lookup_min"]), "shortest n-gram matched"),
            Flag("--speculative-ngram-max-match-window-size", str(spec.params["prompt_lookup_max"]), "longest n-gram matched"),
        ]
    if req.token_map is not None and on.token_map_from and req.version >= Version(on.token_map_from):
        flags.append(Flag("--speculative-token-map", str(req.token_map), "the reduced draft vocabulary (FR-Spec): the kept token ids"))
    files: tuple = ()
    if budget is not None and budget.adaptive:
        digest = hashlib.sha256(spec.label.encode()).hexdigest()[:10]
        path = (req.run_dir or Path(".")) / ADAPTIVE_CONFIG.format(digest=digest)
        flags += [
            Flag("--speculative-adaptive", None, "the draft steps change with the batch size"),
            Flag("--speculative-adaptive-config", str(path), "the policy's draft budget per smallest batch size"),
        ]
        files = ((path, json.dumps(budget.adaptive)),)
    return flags, notes, files


def _budget(req: LaunchRequest) -> tuple[SglangBudget | None, list[str]]:
    """The spec's policy in SGLang's settings (``policy.engines``), None without one, and the notes it adds. What SGLang
    cannot express is refused, or left out and said (``command.policy_shortfall``): a tree then keeps its shape and
    drafts the most at every batch size."""
    spec = req.spec
    policy = launch_policy(req)
    if policy is None:
        return None, []
    nodes = draft_nodes(spec)
    budget = sglang_budget(policy, nodes, cannot_adapt=_cannot_adapt(req))
    lacking = list(budget.cannot)
    if budget.adaptive and spec.method.tree and spec.params.get("topk", 1) > 1:
        lacking.append(f"a tree (topk {spec.params['topk']}) whose budget changes with the batch size: SGLang adapts chains only")
        budget = replace(budget, adaptive=None)
    notes = policy_shortfall(req, "SGLang", lacking)
    if 0 < budget.steps < nodes and not budget.adaptive:
        notes.append(f"its policy drafts at most {budget.steps} of the spec's {nodes} draft nodes")
    return budget, notes


def _cannot_adapt(req: LaunchRequest) -> str | None:
    on = req.spec.method.sglang
    if not on.adapts:
        return f"SGLang adapts EAGLE chains only; {on.algorithm} drafts as many tokens at every batch size"
    if req.version < ADAPTIVE_FROM:
        return f"--speculative-adaptive arrived after {req.version} (first recorded in {ADAPTIVE_FROM})"
    return None


def sglang_command(req: LaunchRequest) -> LaunchCommand:
    name = req.served_name or req.target.name
    program = (
        (*req.program, "--model-path", str(req.target))
        if req.program
        else ("python", "-m", "sglang.launch_server", "--model-path", str(req.target))
    )
    flags = [*served_flags(req.port, name), Flag("--enable-metrics", None, "/metrics with the speculative counters speculab reads")]
    if req.tp > 1:
        flags.append(Flag("--tp-size", str(req.tp), "the target split over this many GPUs"))
    if req.dtype:
        flags.append(Flag("--dtype", req.dtype, "the dtype of speculab's own cells: like with like"))
    if req.max_model_len:
        flags.append(Flag("--context-length", str(req.max_model_len), "the run's longest prompt + output + drafting fit"))
    speculative, notes, files = ([], [], ()) if req.spec.method.proposer.name == "baseline" else _speculative_flags(req)
    omitted = [Flag("--speculative-draft", None, "never an SGLang flag: only an argparse prefix, ambiguous in newer versions")]
    notes += _notes(req)
    return LaunchCommand(
        "sglang", req.version, program, tuple(flags + speculative), (), tuple(omitted), req.port, name, tuple(notes), files=files
    )


def _notes(req: LaunchRequest) -> list[str]:
    on = req.spec.method.sglang
    if on is None:
        return []
    notes = []
    if on.lookup_windows_until and req.version >= Version(on.lookup_windows_until):
        notes.append(
            f"SGLang {req.version} matches n-grams in a trie with its own depth and breadth settings: "
            "prompt_lookup_min/max have no equivalent and its defaults apply"
        )
    if req.token_map is not None and not (on.token_map_from and req.version >= Version(on.token_map_from)):
        notes.append("no --speculative-token-map here: the head drafts over the whole vocabulary")
    return notes
