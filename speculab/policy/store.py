"""Where ``speculab tune`` keeps what it measured, and where ``--policy auto`` finds it.

One folder per machine (CPU model and flags, cores, torch threads and version: what a step's cost depends on), one
per target and dtypes below it, and per method label two files: ``LABEL.policy.json`` (a ``SpeculationPolicy``, as
``--policy FILE`` takes it) and ``LABEL.costs.json`` (the cost model, its check and the testbed).

Knows: the cache folder and the machine's record (``testbed.py``). Does not know: how a policy is measured
(``speculab/tune/``, which writes here; ``methods.py`` reads a tuned policy, for ``policy=auto``, without loading
the tuner).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from speculab.files import cache_dir
from speculab.policy.table import SpeculationPolicy
from speculab.testbed import testbed

MACHINE_KEYS = ("cpu", "cpu_flags", "cpu_count", "torch_threads", "torch", "gpu")


def machine_id() -> str:
    """A short digest of what a step's cost depends on here."""
    bed = testbed()
    return hashlib.sha256(json.dumps({k: bed[k] for k in MACHINE_KEYS}, sort_keys=True).encode()).hexdigest()[:12]


def tuned_folder(loaded) -> Path:
    """The folder of this machine's tuned policies for the loaded target, in its dtype and KV cache dtype."""
    return cache_dir() / "tune" / machine_id() / f"{loaded.path.name}-{loaded.dtype}-kv-{loaded.kv_dtype}"


def file_stem(spec_text: str) -> str:
    """``eagle:topk=4`` -> ``eagle_topk=4``; a long one (a drafter's path) keeps its start and a digest of the whole."""
    stem = re.sub(r"[^A-Za-z0-9_.=,-]+", "_", spec_text)
    return stem if len(stem) <= 80 else f"{stem[:60]}-{hashlib.sha256(spec_text.encode()).hexdigest()[:12]}"


def tuned_paths(loaded, spec_text: str) -> tuple[Path, Path]:
    """(policy file, cost model file) of the method ``spec_text`` (``MethodSpec.text``: no policy) on the loaded target."""
    folder, stem = tuned_folder(loaded), file_stem(spec_text)
    return folder / f"{stem}.policy.json", folder / f"{stem}.costs.json"


def tuned_policy(loaded, spec_text: str) -> SpeculationPolicy:
    """The policy ``speculab tune`` chose for the method ``spec_text`` on this machine and target; a clear error,
    saying the command to run, when it has not run."""
    path, _ = tuned_paths(loaded, spec_text)
    if not path.is_file():
        raise ValueError(
            f"--policy auto: no tuned policy for {spec_text} on this machine ({loaded.path.name}, {loaded.dtype}, KV "
            f"cache {loaded.kv_dtype}); run `speculab tune --method {spec_text}` with the same --model/--dtype/--kv-dtype first"
        )
    return SpeculationPolicy.from_file(path)
