"""The auto rows of a run: methods under ``policy=auto``, whose policy ``speculab tune`` keeps for this machine.

Knows: which of a run's methods read a tuned policy, where it is kept (``policy/store.py``), and how to have one made
when this machine has none for the run: ``speculab tune --method M`` with its defaults at the run's contexts (each long
one at the run's batch sizes there), run here before any cell, so the run measures the policy a user's ``--policy auto``
would read. A stored policy counts as none when it was tuned without one of the run's contexts (its
``tuned_contexts``; a policy written without them was tuned at the workload's own alone), whatever batch sizes it
measured there; the tune then measures the run's contexts and replaces it.
Does not know how a policy is measured: the tuner is handed down from the command line (``speculab/tune`` is built
on the benchmark, so the benchmark does not import it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from speculab.bench.contexts import AS_IS, context_key
from speculab.methods import POLICY, MethodSpec
from speculab.policy.store import tuned_paths
from speculab.policy.table import AUTO, SpeculationPolicy
from speculab.runtime import LoadedModel


@dataclass(frozen=True)
class RunTuner:
    """The tuner handed down (``tune.run.tune_with_defaults``) and the contexts of the run it tunes for."""

    tune: Callable[..., dict]
    contexts: tuple = (None,)  # as the run asks them (settings.BenchConfig.contexts): None, "max" or tokens
    batch_sizes: dict = field(default_factory=dict)  # a long context's key -> the run's batch sizes there
    # context key -> the prompt cache a tune filled there: the run's own prefill of those prompts starts from it
    caches: dict = field(default_factory=dict)

    @classmethod
    def for_run(cls, tune: Callable[..., dict] | None, cfg) -> RunTuner | None:
        """``tune`` for the run of ``cfg`` (settings.BenchConfig); None without a tuner."""
        if tune is None:
            return None
        sizes = {context_key(c): list(cfg.batch_sizes_at(c)) for c in cfg.contexts if c is not None}
        return cls(tune, tuple(cfg.contexts), sizes)

    def __call__(self, spec_text: str, **target) -> dict:
        """The tune of ``spec_text`` at the run's contexts: the workload's own at the tuner's batch sizes (as
        ``speculab tune`` measures it), a long one at the run's."""
        contexts = tuple((c, None if c is None else tuple(self.batch_sizes[context_key(c)])) for c in self.contexts)
        return self.tune(spec_text, **target, contexts=contexts, caches=self.caches)


def tuned_at(path: Path, contexts: tuple) -> bool:
    """Whether the policy file ``path`` was tuned at every one of ``contexts`` (as asked: None, "max" or tokens). One
    that cannot be read counts as tuned: reading it for the cells then says what is wrong with it."""
    if not path.is_file():
        return False
    try:
        tuned = SpeculationPolicy.from_file(path).tuned_contexts or (AS_IS,)
    except ValueError:
        return True
    return {context_key(c) for c in contexts} <= set(tuned)


def untuned(specs: list[MethodSpec], loaded: LoadedModel, contexts: tuple = (None,)) -> list[MethodSpec]:
    """The methods under ``policy=auto`` with no policy tuned on this machine for the loaded target at ``contexts``."""
    return [s for s in specs if s.params.get(POLICY) == AUTO and not tuned_at(tuned_paths(loaded, s.text)[0], contexts)]


def tune_untuned(specs: list[MethodSpec], loaded: LoadedModel, workload: str | None, progress: bool, tuner) -> dict[str, float]:
    """Tune each method ``untuned`` finds with ``tuner`` (a ``RunTuner``: as ``speculab tune`` would, on the run's
    workload, at its contexts); the seconds each took. Without a tuner nothing is tuned: the method's ``policy=auto`` is
    then refused, saying the command to run."""
    took = {}
    for spec in untuned(specs, loaded, tuner.contexts) if tuner is not None else []:
        started = time.perf_counter()
        target = dict(model=str(loaded.path), dtype=loaded.dtype, device=loaded.device, kv_dtype=loaded.kv_dtype)
        tuner(spec.text, **target, workload=workload, quiet=not progress)
        took[spec.label] = round(time.perf_counter() - started, 1)
    return took
