"""What a ``speculab bench`` run is to measure: its settings, and which of its cells are left.

Knows: the profiles, the run's settings (``BenchConfig``), which run this is (a new one, or the one ``--resume``
continues) and which cells it measured already, from the results file so far; and ``RunContext``, what every kind of
cell is handed to write its record.
Does not know: how a cell is measured (``in_process.py``, ``over_http/``), or the report.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from speculab.bench.contexts import context_key
from speculab.bench.results_store import ResultsFile
from speculab.methods import MethodSpec

OPERATIONAL = ("request_timeout", "engine_python", "engine_port")  # settings no figure depends on
ACCEPTANCE = "acceptance"  # the acceptance pass's record kind (acceptance_pass.py)
# quick: batch 1 and 16, the ends of the concurrency a CPU serves, each with the workload's own prompts (about 1.2k
# tokens) and with the same requests after 4,096 tokens of repository files; each cell runs as many of the 16 prompts as
# fit its share of 2 minutes (sizing.py), at least one of each language and a whole batch, 32 tokens each, no acceptance
# pass (the cells' acceptance by language stands in): on a 2-core EPYC Zen 4 one 4k batch of 16 and its prefill take
# nearly four minutes, and both contexts fit `make bench`'s ten only so (`--batch-sizes 1 2 4 8 16` for the curve)
PROFILES = {
    "quick": dict(
        num_prompts=16,
        max_tokens=32,
        repeats=3,
        prompt_cache=True,
        time_limit_s=120.0,
        batch_sizes=(1, 16),
        contexts=(None, 4096),
        context_batch_sizes={},
        acceptance_pass=False,
    ),
    "full": dict(
        num_prompts=124,
        max_tokens=600,
        repeats=3,
        prompt_cache=False,
        time_limit_s=None,
        batch_sizes=(1, 2, 4, 8, 16),
        contexts=(None,),
        context_batch_sizes={},
        acceptance_pass=True,
    ),
}


@dataclass(frozen=True)
class BenchConfig:
    methods: tuple[MethodSpec, ...]
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    contexts: tuple = (None,)  # prompt lengths in target tokens (contexts.py): None the workload's own, "max" the model's
    context_batch_sizes: dict = field(default_factory=dict)  # a context's key (contexts.context_key) -> its own batch sizes
    acceptance_pass: bool = True  # the untimed acceptance pass on 12 prompts a language (acceptance_pass.py)
    num_prompts: int = 16
    max_tokens: int = 32
    temperature: float = 0.0
    repeats: int = 1
    seed: int = 0
    sampling_verify: str = "auto"  # sampled cells: coupled or rejection (sampling.SAMPLING_VERIFY)
    workload: str | None = None
    profile: str = "quick"
    time_limit_s: float | None = None  # in-process cells sized to it (sizing.py); None: every prompt in every cell
    dtype: str | None = None
    kv_dtype: str | None = None  # None: the model's
    model: str | None = None
    prompt_cache: bool = True
    endpoints: tuple = ()  # speculab.bench.over_http.endpoint.Endpoint, measured beside the in-process methods
    request_timeout: float = 600.0  # seconds, per HTTP request
    engines: tuple[str, ...] = ("speculab",)  # where the methods run: speculab in-process, and/or launched engines
    engine_python: str | None = None  # the launched engines' Python (default for vLLM: `make vllm`'s environment)
    engine_port: int = 8300  # where a launched engine listens, on 127.0.0.1
    tp: int = 1  # a launched engine's tensor parallel ranks

    def batch_sizes_at(self, context) -> tuple[int, ...]:
        """The batch sizes measured at ``context`` (as asked: None, "max" or tokens): its own, else ``batch_sizes``."""
        return tuple(self.context_batch_sizes.get(context_key(context), self.batch_sizes))

    @property
    def in_process(self) -> tuple[MethodSpec, ...]:
        return self.methods if "speculab" in self.engines else ()

    @property
    def launched(self) -> list[str]:
        """The engines speculab launches for the methods (vllm, sglang)."""
        return [e for e in self.engines if e != "speculab"]

    def record(self) -> dict:
        d = asdict(self)
        d["methods"] = [m.label for m in self.methods]
        d["endpoints"] = [
            {"url": e.root, "label": e.label, "served_model": e.served_model, "baseline": e.baseline} for e in self.endpoints
        ]  # never the API key
        d["method_params"] = {m.label: {"name": m.name, **m.params} for m in self.methods}
        d["timing"] = "rounds"  # in-process repeats in rounds across one batch size's methods (in_process.measure_in_rounds)
        return d

    def measured(self) -> dict:
        """``record()`` without the operational settings: what a run's figures depend on (a resumed run must keep
        every one of them; a rerun with the same ones reuses the sizing)."""
        return {k: v for k, v in self.record().items() if k not in OPERATIONAL}


@dataclass(frozen=True)
class RunState:
    run_id: str
    # (label, batch size, context) measured already in this run; (label, ACCEPTANCE, None) passed
    done: frozenset[tuple[str, int | str, int | None]]
    previous_run: dict | None  # the run record a resumed run continues (its sizing is kept)

    def pending(self, label: str, batch_size: int | str, context: int | None = None) -> bool:
        return (label, batch_size, context) not in self.done


def run_state(previous: list[dict], resume: bool) -> RunState:
    """A new run, or with ``resume`` the last one in ``previous`` (the results file's records; one written before
    contexts were measured holds the workload's own, None)."""
    runs = [r for r in previous if r.get("kind") == "run"]
    run_id = runs[-1]["run_id"] if runs and resume else uuid.uuid4().hex[:12]
    ours = [r for r in previous if r.get("run_id") == run_id]
    # a cell skipped for memory is done too: its record is the run's answer there (bench/memory_fit.py)
    done = {(r["label"], r["batch_size"], r.get("context")) for r in ours if r.get("kind") in ("cell", "skipped")}
    done |= {(r["label"], ACCEPTANCE, None) for r in ours if r.get("kind") == ACCEPTANCE}
    return RunState(run_id, frozenset(done), runs[-1] if runs and resume else None)


@dataclass
class RunContext:
    """What every kind of cell is handed: the settings, the run's state, where records go, and the progress bar."""

    cfg: BenchConfig
    state: RunState
    results: ResultsFile
    out: Path  # the run's folder (launched engines keep their commands and logs under out/servers)
    bar: tqdm | None = None
    progress: bool = True
    context: int | None = None  # the context the cells measured now run at (contexts.py); None: the workload's own

    def pending(self, label: str, batch_size: int) -> bool:
        """Whether the cell of ``label`` at ``batch_size`` and the current context is left to measure."""
        return self.state.pending(label, batch_size, self.context)

    def write(self, cell: dict) -> None:
        """Append a record; a cell's (measured or skipped) carries the context it ran at."""
        at = {"context": self.context} if cell.get("kind") != ACCEPTANCE else {}
        self.results.append({"run_id": self.state.run_id, **cell, **at})

    def show(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(what)
