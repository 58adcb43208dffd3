"""Reading results.jsonl: the records that count, by label, batch size and context length.

Knows: the record kinds. ``run`` (run_id, started, config, testbed, models, memory: {method:
speculab.models.memory.estimate dict}, endpoints); a resumed run appends another with the same run_id,
and the last one counts. ``cell`` (one label at one batch size and context length: tok_s, latency percentiles, tau,
acceptance figures, engine and transport, ``context``: the context length asked for in target tokens, null or absent
for the workload's prompts as they are, ``context_tokens``: the median prompt length of its prompts, ...); only cells
of the last run's run_id count, and a repeated (label, batch_size, context) counts its last record. ``skipped`` (a
cell not run for memory, with its ``context``). ``acceptance`` (one label's untimed acceptance pass, at the
workload's prompts as they are: by_domain {domain: prompts, acceptance_rate, tau, ...}), the last of the run's per
label. Unknown kinds and fields are ignored; lines that are not JSON (a truncated last line) are skipped and listed.

A ``Results`` holds every context's cells (``all_cells``) and shows one context's as ``cells``, keyed (label,
batch_size) as in a run of one context; ``load_results`` shows the first of ``contexts`` (null first, then the
shortest), ``at_context`` another. A label's speedup is taken over its own engine's baseline at the same batch size
and context (``speedups.py``: paired by round where the cells were timed in rounds), never across contexts; each
label has a short form for display (``labels.py``), the full one staying the key.

Does not know: how cells were measured, or how anything is rendered (a context's name: ``numbers.context_name``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from speculab.bench.report.labels import short_labels
from speculab.bench.report.speedups import Speedup, speedup

BASELINE_METHOD = "baseline"
DOMAIN_ORDER = ("python", "typescript", "sql", "agentic")
ACCEPTANCE_DEFINITION = (
    "acceptance rate = accepted draft tokens / drafted depth (draft tokens along the verified path; "
    "speculab.speculative.stats); τ = tokens emitted per verify step, bonus token included. Per the study's errata, "
    "figures under other definitions (SGLang's accept length over tree nodes) are not comparable."
)


# ---------------------------------------------------------------- reading results.jsonl


Context = int | None  # the context length asked for, in target tokens; None: the workload's prompts as they are
CellKey = tuple[str, int, Context]  # (label, batch_size, context)


def context_order(context: Context) -> tuple[bool, int]:
    """None first, then the shorter context."""
    return (context is not None, context or 0)


@dataclass
class Results:
    run: dict[str, Any] | None
    all_cells: dict[CellKey, dict[str, Any]]  # every context's cells: (label, batch_size, context) -> the last cell record
    skipped_lines: list[int] = field(default_factory=list)  # 1-based numbers of lines that were not JSON objects
    acceptance: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> the last run's acceptance-pass record
    not_run: list[dict[str, Any]] = field(default_factory=list)  # the last run's cells skipped for memory, every context's
    context: Context = None  # the context ``cells`` shows

    @cached_property
    def cells(self) -> dict[tuple[str, int], dict[str, Any]]:
        """This context's cells: (label, batch_size) -> the last cell record."""
        return {(lab, b): c for (lab, b, ctx), c in self.all_cells.items() if ctx == self.context}

    @cached_property
    def contexts(self) -> list[Context]:
        """The contexts with a cell or a skipped record, null first, then ascending (``run.config.contexts`` may name
        more: ``asked_contexts``)."""
        found = {ctx for _, _, ctx in self.all_cells} | {record_context(r) for r in self.not_run}
        return sorted(found, key=context_order)

    @property
    def asked_contexts(self) -> list[Context]:
        """``run.config.contexts`` given in tokens (a name such as ``max`` is resolved only in the cells' ``context``);
        runs older than the context axis asked for [None]."""
        asked = (self.run or {}).get("config", {}).get("contexts") or [None]
        return sorted({c for c in asked if c is None or isinstance(c, int)}, key=context_order)

    @property
    def several_contexts(self) -> bool:
        return len(self.contexts) > 1

    def at_context(self, context: Context) -> Results:
        """The same results showing ``context``'s cells as ``cells``."""
        return self if context == self.context else replace(self, context=context)

    @property
    def views(self) -> list[Results]:
        """One ``Results`` per context, in ``contexts`` order."""
        return [self.at_context(c) for c in self.contexts]

    def context_tokens(self, context: Context) -> int | None:
        """The median over ``context``'s cells of ``cell.context_tokens`` (each the median prompt length of its
        prompts, in target tokens); None where none recorded it."""
        found = [c["context_tokens"] for (_, _, ctx), c in self.all_cells.items() if ctx == context and c.get("context_tokens")]
        return round(statistics.median(found)) if found else None

    @property
    def all_batch_sizes(self) -> list[int]:
        """The batch sizes measured at any context."""
        return sorted({b for _, b, _ in self.all_cells})

    @property
    def labels(self) -> list[str]:
        """Labels in report order: baselines first, then in the run's order of methods (``run.config.methods``: labels,
        or in older runs method names), then by first appearance."""
        methods = list((self.run or {}).get("config", {}).get("methods") or [])
        seen: dict[str, int] = {}
        for label, _, _ in self.all_cells:
            seen.setdefault(label, len(seen))

        def rank(label: str) -> tuple[int, int, int]:
            method = self.method(label)
            in_config = methods.index(label) if label in methods else methods.index(method) if method in methods else len(methods)
            return (method != BASELINE_METHOD, in_config, seen[label])

        return sorted(seen, key=rank)

    def method(self, label: str) -> str:
        records = [c for (lab, _, _), c in self.all_cells.items() if lab == label] + [self.acceptance.get(label) or {}]
        return next((c["method"] for c in records if c.get("method")), label)

    @property
    def baseline_label(self) -> str | None:
        return next((lab for lab in self.labels if self.method(lab) == BASELINE_METHOD), None)

    @property
    def batch_sizes(self) -> list[int]:
        """The batch sizes measured at this context (``all_batch_sizes``: at any)."""
        return sorted({b for _, b in self.cells})

    def batches_of(self, label: str) -> list[int]:
        """The batch sizes ``label`` was measured at, at this context."""
        return sorted(b for lab, b in self.cells if lab == label)

    def tok_s(self, label: str, batch: int) -> float | None:
        return (self.cells.get((label, batch)) or {}).get("tok_s")

    def engine_of(self, label: str) -> str:
        """``engine (transport)``: speculab in-process, or the engine behind an endpoint, over HTTP."""
        cell = next(c for (lab, _, _), c in self.all_cells.items() if lab == label)
        return f"{cell.get('engine', 'speculab')} ({cell.get('transport', 'in-process')})"

    def is_baseline(self, label: str) -> bool:
        return self.method(label) == BASELINE_METHOD

    def baseline_of(self, label: str) -> str | None:
        """The baseline a label's speedup is taken over: its own engine's (same engine and transport), else the run's."""
        mine = self.engine_of(label)
        return next((lab for lab in self.labels if self.is_baseline(lab) and self.engine_of(lab) == mine), self.baseline_label)

    def measured_speedup(self, label: str, batch: int) -> Speedup | None:
        """The one speedup every table, plot and finding shows: over the label's baseline at ``batch`` and this
        context (``speedups.py``)."""
        base = self.baseline_of(label)
        return speedup(self.cells.get((label, batch)), self.cells.get((base, batch)) if base else None)

    def speedup(self, label: str, batch: int) -> float | None:
        found = self.measured_speedup(label, batch)
        return None if found is None else found.value

    @property
    def all_labels(self) -> list[str]:
        """The cells' labels in report order, then labels only the acceptance pass measured."""
        return self.labels + [lab for lab in self.acceptance if lab not in self.labels]

    @cached_property
    def short_names(self) -> dict[str, str]:
        return short_labels(self.all_labels)

    def short(self, label: str) -> str:
        """The label as the report shows it (``labels.py``); the Methods table gives the full one."""
        return self.short_names.get(label, label)

    def memory(self, label: str) -> dict[str, Any] | None:
        stored = (self.run or {}).get("memory") or {}
        return stored.get(label) or stored.get(self.method(label))


def load_results(results_path: str | Path) -> Results:
    """The records that count in ``results_path`` (see the module docstring)."""
    runs: list[dict] = []
    cells: list[dict] = []
    passes: list[dict] = []
    not_run: list[dict] = []
    skipped: list[int] = []
    for number, line in enumerate(Path(results_path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped.append(number)
            continue
        if not isinstance(record, dict):
            skipped.append(number)
        elif record.get("kind") == "run":
            runs.append(record)
        elif record.get("kind") == "cell" and "label" in record and "batch_size" in record:
            cells.append(record)
        elif record.get("kind") == "acceptance" and "label" in record:
            passes.append(record)
        elif record.get("kind") == "skipped" and "label" in record:
            not_run.append(record)
    run = runs[-1] if runs else None
    run_id = run.get("run_id") if run else None
    chosen: dict[CellKey, dict] = {}
    for cell in cells:
        if run_id is None or cell.get("run_id") == run_id:
            chosen[(cell["label"], int(cell["batch_size"]), record_context(cell))] = cell
    accepted = {p["label"]: p for p in passes if run_id is None or p.get("run_id") == run_id}
    results = Results(run, chosen, skipped, accepted, [r for r in not_run if run_id is None or r.get("run_id") == run_id])
    return results.at_context(results.contexts[0]) if results.contexts else results


def record_context(record: dict[str, Any]) -> Context:
    """A cell's or skipped record's context; None where it has none (records older than the context axis)."""
    context = record.get("context")
    return None if context is None else int(context)


def acceptance_cell(results: Results, label: str) -> dict[str, Any]:
    """Acceptance figures come from the label's cell at its smallest measured batch size."""
    batches = results.batches_of(label)
    return results.cells[(label, batches[0])] if batches else {}


def domains_of(results: Results, key: str) -> list[str]:
    found = {d for lab in results.labels for d in (acceptance_cell(results, lab).get(key) or {})}
    return [d for d in DOMAIN_ORDER if d in found] + sorted(found - set(DOMAIN_ORDER))
