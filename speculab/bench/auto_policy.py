"""The auto rows of a run: methods under ``policy=auto``, whose policy ``speculab tune`` keeps for this machine.

Knows: which of a run's methods read a tuned policy, where it is kept (``policy/store.py``), and how to have one made
when this machine has none: ``speculab tune --method M`` with its defaults, run here before any cell, so the run
measures the policy a user's ``--policy auto`` would read. Does not know how a policy is measured: the tuner is handed
down from the command line (``speculab/tune`` is built on the benchmark, so the benchmark does not import it).
"""

from __future__ import annotations

import time

from speculab.methods import POLICY, MethodSpec
from speculab.policy.store import tuned_paths
from speculab.policy.table import AUTO
from speculab.runtime import LoadedModel


def untuned(specs: list[MethodSpec], loaded: LoadedModel) -> list[MethodSpec]:
    """The methods under ``policy=auto`` with no tuned policy on this machine for the loaded target."""
    return [s for s in specs if s.params.get(POLICY) == AUTO and not tuned_paths(loaded, s.text)[0].is_file()]


def tune_untuned(specs: list[MethodSpec], loaded: LoadedModel, workload: str | None, progress: bool, tuner) -> dict[str, float]:
    """Tune each method ``untuned`` finds with ``tuner`` (``tune.run.tune_with_defaults``: as ``speculab tune`` would,
    on the run's workload); the seconds each took. Without a tuner nothing is tuned: the method's ``policy=auto`` is
    then refused, saying the command to run."""
    took = {}
    for spec in untuned(specs, loaded) if tuner is not None else []:
        started = time.perf_counter()
        target = dict(model=str(loaded.path), dtype=loaded.dtype, device=loaded.device, kv_dtype=loaded.kv_dtype)
        tuner(spec.text, **target, workload=workload, quiet=not progress)
        took[spec.label] = round(time.perf_counter() - started, 1)
    return took
