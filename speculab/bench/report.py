"""Benchmark report from results.jsonl: report.md, a self-contained report.html, PNG plots, a summary dict.

Knows: the two record kinds of results.jsonl. ``run`` (run_id, started, config, testbed, models,
memory: {method: speculab.bench.memory.estimate dict}); a resumed run appends another with the same
run_id, and the last one counts. ``cell`` (one method/label at one batch size: tok_s, latency
percentiles, tau, acceptance figures, ...); only cells of the last run's run_id count, and a repeated
(label, batch_size) counts its last record. Unknown kinds and fields are ignored; lines that are not
JSON (a truncated last line) are skipped and listed in the report. Speedup is tok_s over the baseline's
tok_s at the same batch size. Every number in the report is a results.jsonl field or computed from
fields named next to the table; no figure is canned.

Does not know: how cells were measured (speculab.bench.runner) or how memory is estimated (memory.py);
it reads what the runner stored.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASELINE_METHOD = "baseline"
DOMAIN_ORDER = ("python", "typescript", "sql")
PLOT_FILES = {"tok_s": "tok_s_vs_batch.png", "speedup": "speedup_vs_batch.png", "acceptance": "acceptance_by_domain.png"}
ACCEPTANCE_DEFINITION = (
    "acceptance rate = accepted draft tokens / drafted depth (draft tokens along the verified path; "
    "speculab.speculative.stats); τ = tokens emitted per verify step, bonus token included. Per the study's errata, "
    "figures under other definitions (SGLang's accept length over tree nodes) are not comparable."
)


# ---------------------------------------------------------------- reading results.jsonl


@dataclass
class Results:
    run: dict[str, Any] | None
    cells: dict[tuple[str, int], dict[str, Any]]  # (label, batch_size) -> the last cell record
    skipped_lines: list[int] = field(default_factory=list)  # 1-based numbers of lines that were not JSON objects

    @property
    def labels(self) -> list[str]:
        """Labels in report order: baselines first, then by the run's method order, then by first appearance."""
        methods = list((self.run or {}).get("config", {}).get("methods") or [])
        seen: dict[str, int] = {}
        for label, _ in self.cells:
            seen.setdefault(label, len(seen))

        def rank(label: str) -> tuple[int, int, int]:
            method = self.method(label)
            in_config = methods.index(method) if method in methods else len(methods)
            return (method != BASELINE_METHOD, in_config, seen[label])

        return sorted(seen, key=rank)

    def method(self, label: str) -> str:
        return next(c.get("method", label) for (lab, _), c in self.cells.items() if lab == label)

    @property
    def baseline_label(self) -> str | None:
        return next((lab for lab in self.labels if self.method(lab) == BASELINE_METHOD), None)

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({b for _, b in self.cells})

    def batches_of(self, label: str) -> list[int]:
        return sorted(b for lab, b in self.cells if lab == label)

    def tok_s(self, label: str, batch: int) -> float | None:
        return (self.cells.get((label, batch)) or {}).get("tok_s")

    def engine_of(self, label: str) -> str:
        """``engine (transport)``: speculab in-process, or the engine behind an endpoint, over HTTP."""
        cell = next(c for (lab, _), c in self.cells.items() if lab == label)
        return f"{cell.get('engine', 'speculab')} ({cell.get('transport', 'in-process')})"

    def is_baseline(self, label: str) -> bool:
        return self.method(label) == BASELINE_METHOD

    def baseline_of(self, label: str) -> str | None:
        """The baseline a label's speedup is taken over: its own engine's (same engine and transport), else the run's."""
        mine = self.engine_of(label)
        return next((lab for lab in self.labels if self.is_baseline(lab) and self.engine_of(lab) == mine), self.baseline_label)

    def speedup(self, label: str, batch: int) -> float | None:
        base = self.baseline_of(label)
        mine, ref = self.tok_s(label, batch), self.tok_s(base, batch) if base else None
        return mine / ref if mine is not None and ref else None

    def memory(self, label: str) -> dict[str, Any] | None:
        stored = (self.run or {}).get("memory") or {}
        return stored.get(label) or stored.get(self.method(label))


def load_results(results_path: str | Path) -> Results:
    """The records that count in ``results_path`` (see the module docstring)."""
    runs: list[dict] = []
    cells: list[dict] = []
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
    run = runs[-1] if runs else None
    run_id = run.get("run_id") if run else None
    chosen: dict[tuple[str, int], dict] = {}
    for cell in cells:
        if run_id is None or cell.get("run_id") == run_id:
            chosen[(cell["label"], int(cell["batch_size"]))] = cell
    return Results(run, chosen, skipped)


# ---------------------------------------------------------------- findings computed from the numbers


@dataclass(frozen=True)
class BreakEven:
    last_faster: int | None  # largest measured batch size with speedup >= 1
    first_slower: int | None  # smallest measured batch size with speedup < 1
    crossing: float | None  # batch where speedup = 1, linear in log2(batch) between first_slower and the point before it
    recovers: bool  # speedup >= 1 again at a batch size above first_slower


def break_even(points: list[tuple[int, float | None]]) -> BreakEven:
    """Break-even of one method from (batch_size, speedup) points, any order; points without speedup are dropped."""
    pts = sorted((b, s) for b, s in points if s is not None)
    last_faster = max((b for b, s in pts if s >= 1.0), default=None)
    slower_at = next((i for i, (_, s) in enumerate(pts) if s < 1.0), None)
    if slower_at is None:
        return BreakEven(last_faster, None, None, False)
    first_slower = pts[slower_at][0]
    crossing = None
    if slower_at > 0:  # every earlier point is >= 1
        (b0, s0), (b1, s1) = pts[slower_at - 1], pts[slower_at]
        x0, x1 = math.log2(b0), math.log2(b1)
        crossing = 2 ** (x0 + (1.0 - s0) * (x1 - x0) / (s1 - s0))
    return BreakEven(last_faster, first_slower, crossing, last_faster is not None and last_faster > first_slower)


def winners(results: Results) -> dict[int, list[tuple[str, float]]]:
    """Per batch size: (label, tok_s) of every label measured there, fastest first."""
    table: dict[int, list[tuple[str, float]]] = {}
    for batch in results.batch_sizes:
        ranked = [(lab, results.tok_s(lab, batch)) for lab in results.labels]
        table[batch] = sorted(((lab, t) for lab, t in ranked if t is not None), key=lambda x: -x[1])
    return table


def _ranges(batches: list[int], all_batches: list[int]) -> str:
    """'1–4, 16' for batches that are runs of consecutive measured sizes."""
    groups: list[list[int]] = []
    for b in batches:
        if groups and all_batches.index(b) == all_batches.index(groups[-1][-1]) + 1:
            groups[-1].append(b)
        else:
            groups.append([b])
    return ", ".join(str(g[0]) if len(g) == 1 else f"{g[0]}–{g[-1]}" for g in groups)


def best_use(results: Results, label: str) -> str:
    """Where a label pays off, from its speedups and from where it is fastest."""
    batches = results.batches_of(label)
    fastest = [b for b, ranked in winners(results).items() if ranked and ranked[0][0] == label]
    tail = f"; fastest at batch {_ranges(fastest, results.batch_sizes)}" if fastest else ""
    if results.is_baseline(label):
        return f"reference{tail}"
    speedups = {b: results.speedup(label, b) for b in batches}
    if all(s is None for s in speedups.values()):
        return f"no baseline to compare{tail}"
    faster = [b for b, s in speedups.items() if s is not None and s > 1.0]
    if not faster:
        return "never faster here"
    if faster == batches:
        return f"all measured batch sizes ({batches[0]}–{batches[-1]}){tail}"
    if faster == batches[: len(faster)]:
        return f"batch ≤ {faster[-1]}{tail}"
    return f"batch {_ranges(faster, batches)}{tail}"


# ---------------------------------------------------------------- formatting

DASH = "—"


def _num(x: float | None, digits: int = 1) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def _x(speedup: float | None) -> str:
    return DASH if speedup is None else f"{speedup:.2f}×"


def _pct(x: float | None) -> str:
    return DASH if x is None else f"{100 * x:.1f}%"


def _ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{1000 * seconds:.1f}"


def _bytes(n: float | None) -> str:
    """IEC units: 327680 -> '320.0 KiB'."""
    if n is None:
        return DASH
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}" if unit != "KiB" else f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _int(n: int | None) -> str:
    return DASH if n is None else f"{n:,}"


def _tok_x(results: Results, label: str, batch: int) -> str:
    tok = results.tok_s(label, batch)
    if tok is None:
        return DASH
    speedup = results.speedup(label, batch)
    return _num(tok) if results.is_baseline(label) or speedup is None else f"{_num(tok)} ({_x(speedup)})"


def _nearest(batches: list[int], wanted: int) -> int | None:
    return min(batches, key=lambda b: (abs(math.log2(b) - math.log2(wanted)), b)) if batches else None


# ---------------------------------------------------------------- document blocks (rendered to markdown and HTML)


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    source: str  # which results.jsonl fields the numbers come from


Block = tuple  # ("h", level, text) | ("p", text) | ("table", Table) | ("img", file name, alt text)


def _testbed_blocks(results: Results) -> list[Block]:
    run = results.run or {}
    tb, cfg, models = run.get("testbed") or {}, run.get("config") or {}, run.get("models") or {}
    ram = tb.get("ram_bytes")
    rows = [[k, DASH if v is None else str(v)] for k, v in (
        ("OS", tb.get("os")), ("Kernel", tb.get("kernel")), ("CPU", tb.get("cpu")),
        ("RAM", f"{_bytes(ram)} ({ram:,} bytes)" if isinstance(ram, int) else ram), ("GPU", tb.get("gpu") or "none"),
        ("Python", tb.get("python")), ("torch", tb.get("torch")), ("speculab", tb.get("speculab")),
    )]
    model_rows = []
    if models.get("target"):
        model_rows.append(["target", *(str(models["target"].get(k, DASH)) for k in ("id", "path", "sha256"))])
    for method, m in (models.get("drafters") or {}).items():
        model_rows.append([f"drafter ({method})", *(str(m.get(k, DASH)) for k in ("id", "path", "sha256"))])
    cfg_rows = [[k, json.dumps(cfg[k]) if isinstance(cfg[k], (list, dict)) else str(cfg[k])] for k in cfg]
    blocks: list[Block] = [("h", 2, "Testbed"), ("table", Table(["Field", "Value"], rows, "`run.testbed`"))]
    if model_rows:
        blocks.append(("table", Table(["Role", "Model id", "Path", "sha256"], model_rows, "`run.models`")))
    engines = [[label, results.engine_of(label), str(c.get("engine_version") or tb.get("speculab") or DASH), str(c.get("endpoint") or DASH),
                 f"`{c['server_command']}`" if c.get("server_command") else DASH]
                for label in results.labels for c in [_acceptance_cell(results, label)]]
    if any(e[1] != "speculab (in-process)" for e in engines):
        blocks.append(("table", Table(["Label", "Engine", "Version", "Endpoint", "Server command"], engines,
                                      "`cell.engine`, `cell.transport`, `cell.engine_version`, `cell.endpoint`, `cell.server_command`; "
                                      "each label's speedup is over its own engine's baseline")))
    if cfg_rows:
        blocks.append(("table", Table(["Setting", "Value"], [["run_id", str(run.get("run_id"))], ["started", str(run.get("started"))], *cfg_rows], "`run.config`")))
    return blocks


def _acceptance_cell(results: Results, label: str) -> dict[str, Any]:
    """Acceptance figures come from the label's cell at its smallest measured batch size."""
    batches = results.batches_of(label)
    return results.cells[(label, batches[0])] if batches else {}


def _memory_summary(mem: dict[str, Any] | None) -> str:
    if not mem:
        return DASH
    return f"{_bytes(mem.get('drafter_weights_bytes'))} weights + {_bytes(mem.get('drafter_kv_bytes_per_token'))}/token KV"


def _decision_blocks(results: Results) -> list[Block]:
    if not results.cells:
        return [("h", 2, "Executive decision matrix"), ("p", "No measured cells in results.jsonl.")]
    low, high = _nearest(results.batch_sizes, 1), _nearest(results.batch_sizes, 8)
    headers = ["Method", f"tok/s at batch {low} (speedup)"]
    if high != low:
        headers.append(f"tok/s at batch {high} (speedup)")
    headers += ["Acceptance rate", "Mean τ", "Drafter memory", "Best use (from the numbers)"]
    rows = []
    for label in results.labels:
        cell = _acceptance_cell(results, label)
        row = [label, _tok_x(results, label, low)] + ([_tok_x(results, label, high)] if high != low else [])
        is_base = results.is_baseline(label)
        mem = results.memory(label)
        row += [
            "n/a" if is_base else _pct(cell.get("acceptance_rate")),
            _num(cell.get("tau"), 2),
            "0" if is_base and not (mem or {}).get("drafter_weights_bytes") else _memory_summary(mem),
            best_use(results, label),
        ]
        rows.append(row)
    source = ("`cell.tok_s`; speedup = tok_s / its engine's baseline tok_s at the same batch size; `cell.acceptance_rate` and "
              "`cell.tau` of each label's smallest measured batch size; memory: `run.memory[method].drafter_weights_bytes`"
              " and `.drafter_kv_bytes_per_token`; best use: batch sizes where speedup > 1 and where the label has the highest tok/s")
    return [("h", 2, "Executive decision matrix"), ("table", Table(headers, rows, source)), ("p", ACCEPTANCE_DEFINITION)]


def _domains(results: Results, key: str) -> list[str]:
    found = {d for lab in results.labels for d in (_acceptance_cell(results, lab).get(key) or {})}
    return [d for d in DOMAIN_ORDER if d in found] + sorted(found - set(DOMAIN_ORDER))


def _acceptance_blocks(results: Results) -> list[Block]:
    spec = [lab for lab in results.labels if not results.is_baseline(lab)]
    blocks: list[Block] = [("h", 2, "Acceptance by language")]
    for key, overall, fmt, title in (("acceptance_by_domain", "acceptance_rate", _pct, "Acceptance rate"),
                                     ("tau_by_domain", "tau", lambda v: _num(v, 2), "Mean τ")):
        domains = _domains(results, key)
        rows = []
        for lab in spec:
            cell = _acceptance_cell(results, lab)
            rows.append([lab, str(cell.get("batch_size", DASH)), *(fmt((cell.get(key) or {}).get(d)) for d in domains), fmt(cell.get(overall))])
        blocks.append(("table", Table([f"{title}: method", "batch", *domains, "all"], rows, f"`cell.{key}` and `cell.{overall}` at each label's smallest batch size")))
    if spec:
        blocks.append(("img", PLOT_FILES["acceptance"], "Acceptance rate by domain"))
    return blocks


def _speed_blocks(results: Results) -> list[Block]:
    labels = results.labels
    rows = [[str(b), *(_tok_x(results, lab, b) for lab in labels)] for b in results.batch_sizes]
    detail = []
    for (lab, b) in sorted(results.cells, key=lambda k: (labels.index(k[0]), k[1])):
        c = results.cells[(lab, b)]
        gi = c.get("greedy_identical")
        detail.append([lab, str(b), _int(c.get("num_prompts")), _int(c.get("repeats")), _int(c.get("output_tokens")), _num(c.get("wall_s"), 2),
                       _num(c.get("tok_s")), _num(c.get("tok_s_per_request"), 2), _ms(c.get("ttft_p50_s")), _ms(c.get("ttft_p99_s")),
                       _ms(c.get("queue_p50_s")), _ms(c.get("tpot_p50_s")), _ms(c.get("tpot_p99_s")), _ms(c.get("itl_p50_s")), _ms(c.get("itl_p99_s")),
                       _num(c.get("tau"), 2), _pct(c.get("acceptance_rate")), _bytes(c.get("peak_rss_bytes")),
                       DASH if gi is None else ("yes" if gi else "NO"), _pct(c.get("agreement"))])
    detail_headers = ["label", "batch", "prompts", "repeats", "output tokens", "wall s", "tok/s", "tok/s/request", "TTFT p50 ms", "TTFT p99 ms",
                      "queue p50 ms", "TPOT p50 ms", "TPOT p99 ms", "ITL p50 ms", "ITL p99 ms", "τ", "acceptance", "peak RSS", "greedy identical", "agreement"]
    return [
        ("h", 2, "Speed vs concurrency"),
        ("table", Table(["batch", *labels], rows, "`cell.tok_s` (output tok/s, median over repeats); in brackets tok_s / baseline tok_s at that batch size")),
        ("img", PLOT_FILES["tok_s"], "Output tok/s vs batch size"),
        ("img", PLOT_FILES["speedup"], "Speedup vs batch size"),
        ("h", 3, "Every cell"),
        ("table", Table(detail_headers, detail, "the `cell` record of each (label, batch_size), the same-named fields; latencies in ms")),
    ]


def _memory_blocks(results: Results) -> list[Block]:
    stored = (results.run or {}).get("memory") or {}
    if not stored:
        return [("h", 2, "KV capacity"), ("p", "No memory estimates in results.jsonl (`run.memory` is empty).")]
    base = stored.get(BASELINE_METHOD) or {}
    rows = []
    for method, m in stored.items():
        tokens, base_tokens = m.get("kv_capacity_tokens"), base.get("kv_capacity_tokens")
        change = f"{100 * (tokens / base_tokens - 1):+.1f}%" if tokens is not None and base_tokens else DASH
        rows.append([method, str(m.get("drafter_kind") or "none"), _int(m.get("drafter_parameters")), _bytes(m.get("drafter_weights_bytes")),
                     _bytes(m.get("weights_bytes_per_device")), _int(m.get("kv_bytes_per_token_per_device")), _bytes(m.get("kv_free_bytes_per_device")),
                     _int(tokens), _int(m.get("kv_capacity_sessions")), change])
    any_m = next(iter(stored.values()))
    assumptions = (f"Analytic estimates (speculab.bench.memory): device memory {_bytes(any_m.get('device_bytes'))} × utilisation "
                   f"{any_m.get('memory_utilization')}, overhead {_bytes(any_m.get('overhead_bytes_per_device'))} per device, tensor parallel "
                   f"{any_m.get('tensor_parallel')}, target weights {any_m.get('target_weight_format')}, KV {any_m.get('kv_dtype_bytes')} bytes per value; "
                   f"sessions are whole sessions of {any_m.get('session_tokens')} tokens.")
    headers = ["method", "drafter", "drafter params", "drafter weights", "weights per device", "KV bytes/token per device",
               "KV free per device", "KV capacity tokens", "sessions", "tokens vs baseline"]
    source = ("`run.memory[method]`: drafter_parameters, drafter_weights_bytes, weights_bytes_per_device, kv_bytes_per_token_per_device, "
              "kv_free_bytes_per_device, kv_capacity_tokens, kv_capacity_sessions")
    return [("h", 2, "KV capacity"), ("table", Table(headers, rows, source)), ("p", assumptions)]


def _break_even_text(results: Results, label: str, be: BreakEven) -> str:
    pts = {b: results.speedup(label, b) for b in results.batches_of(label)}
    if all(s is None for s in pts.values()):
        return "no baseline at its batch sizes"
    if be.first_slower is None:
        return f"speedup ≥ 1 at every measured batch size (up to {be.last_faster}); no break-even observed"
    measured = sorted(b for b, s in pts.items() if s is not None)
    if be.crossing is None:
        text = f"slower than baseline from the smallest measured batch size ({be.first_slower}: {_x(pts[be.first_slower])})"
    else:
        before = measured[measured.index(be.first_slower) - 1]
        text = (f"speedup ≥ 1 up to batch {before} ({_x(pts[before])}), below 1 at batch {be.first_slower} ({_x(pts[be.first_slower])}); "
                f"break-even ≈ batch {be.crossing:.1f} (interpolated linearly in log2(batch))")
    if be.recovers:
        text += f"; speedup is ≥ 1 again at batch {be.last_faster} (not monotonic)"
    return text


def _recommendation(results: Results) -> str:
    base = results.baseline_label
    ranked = winners(results)
    sentences = []
    runs: list[tuple[str, list[int]]] = []
    for b, order in ranked.items():
        if not order:
            continue
        if runs and runs[-1][0] == order[0][0]:
            runs[-1][1].append(b)
        else:
            runs.append((order[0][0], [b]))

    def figures(label: str, b: int) -> str:
        order = ranked[b]
        tok = results.tok_s(label, b)
        parts = [f"{_num(tok)} tok/s at batch {b}"]
        if not results.is_baseline(label) and results.speedup(label, b) is not None:
            parts.append(f"{_x(results.speedup(label, b))} baseline")
        if len(order) > 1:
            second, second_tok = order[1]
            parts.append(f"{100 * (tok / second_tok - 1):+.0f}% over {second}")
        return ", ".join(parts)

    for label, batches in runs:
        where = _ranges(batches, results.batch_sizes)
        ends = [batches[0]] if len(batches) == 1 else [batches[0], batches[-1]]
        name = f"plain decoding ({label})" if results.is_baseline(label) else label
        sentences.append(f"At batch {where}, {name} is fastest: " + "; ".join(figures(label, b) for b in ends) + ".")
    base_mem = results.memory(base) if base else None
    for label in dict.fromkeys(lab for lab, _ in runs if not results.is_baseline(lab)):
        mem = results.memory(label)
        if not mem:
            sentences.append(f"{label}: no memory estimate recorded.")
            continue
        text = f"{label} costs {_bytes(mem.get('drafter_weights_bytes'))} of drafter weights and {_bytes(mem.get('drafter_kv_bytes_per_token'))} of KV per token"
        target_kv = mem.get("target_kv_bytes_per_token")
        if target_kv:
            text += f" ({100 * mem.get('drafter_kv_bytes_per_token', 0) / target_kv:.1f}% of the target's {_bytes(target_kv)})"
        tokens = mem.get("kv_capacity_tokens")
        if tokens is not None:
            text += f", leaving KV room for {_int(tokens)} tokens ({_int(mem.get('kv_capacity_sessions'))} sessions of {mem.get('session_tokens')})"
            if base_mem and base_mem.get("kv_capacity_tokens"):
                text += f" against {_int(base_mem['kv_capacity_tokens'])} without speculation ({100 * (tokens / base_mem['kv_capacity_tokens'] - 1):+.1f}%)"
        sentences.append(text + ".")
    if not base:
        sentences.append("There is no baseline in these results, so no speedups.")
    verdict = "; ".join(f"{'no speculation' if results.is_baseline(lab) else lab} at batch {_ranges(bs, results.batch_sizes)}" for lab, bs in runs)
    if verdict:
        sentences.append(f"Recommendation from these measurements: {verdict}.")
    setting = _one_setting(runs, base)
    if setting:
        sentences.append(setting)
    return " ".join(sentences)


def _one_setting(runs: list[tuple[str, list[int]]], base: str | None) -> str | None:
    """When one speculative method wins every batch size below those where plain decoding wins, the one
    server setting that follows both: that method with speculation switched off above its range."""
    spec = {lab for lab, _ in runs if lab != base}
    if base is None or len(spec) != 1 or runs[-1][0] != base or runs[0][0] == base:
        return None
    (label,) = spec
    spec_batches = [b for lab, bs in runs if lab == label for b in bs]
    base_batches = [b for lab, bs in runs if lab == base for b in bs]
    if max(spec_batches) >= min(base_batches):
        return None
    return (f"As one server setting: {label} with `disable_by_batch_size={max(spec_batches)}`, which decodes plainly "
            f"above {max(spec_batches)} running requests (measure it as `{label.split('(')[0]}:...,disable_by_batch_size="
            f"{max(spec_batches)}`).")


def _findings_blocks(results: Results) -> list[Block]:
    rows = []
    for label in results.labels:
        if results.is_baseline(label):
            continue
        be = break_even([(b, results.speedup(label, b)) for b in results.batches_of(label)])
        rows.append([label, _int(be.last_faster), _int(be.first_slower), _num(be.crossing, 1), _break_even_text(results, label, be)])
    blocks: list[Block] = [("h", 2, "Findings")]
    blocks.append(("table", Table(["method", "largest batch with speedup ≥ 1", "first batch with speedup < 1", "break-even (interpolated)", "reading"],
                                  rows, "speedup = `cell.tok_s` / baseline `cell.tok_s` at the same batch size; break-even interpolated linearly in log2(batch)")))
    blocks.append(("p", _recommendation(results)))
    differs = [f"{lab} at batch {b}" for (lab, b), c in results.cells.items() if c.get("greedy_identical") is False]
    if differs:
        blocks.append(("p", "**Correctness warning:** at temperature 0 the output differed from the baseline's (`cell.greedy_identical` false) for "
                            + ", ".join(differs) + "."))
    if results.skipped_lines:
        blocks.append(("p", f"Skipped unreadable results.jsonl lines: {', '.join(map(str, results.skipped_lines))}."))
    return blocks


def _blocks(results: Results) -> list[Block]:
    run_id = (results.run or {}).get("run_id", DASH)
    return [("h", 1, f"speculab benchmark report — run {run_id}"),
            ("p", "Generated from results.jsonl only; each table names the fields its numbers come from."),
            *_testbed_blocks(results), *_decision_blocks(results), *_acceptance_blocks(results),
            *_speed_blocks(results), *_memory_blocks(results), *_findings_blocks(results)]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append(f"{'#' * block[1]} {block[2]}")
        elif kind == "p":
            out.append(block[1])
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})")
        elif kind == "table":
            t: Table = block[1]
            lines = ["| " + " | ".join(map(_md_cell, t.headers)) + " |", "|" + "---|" * len(t.headers)]
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in t.rows]
            out.append("\n".join(lines) + f"\n\n*Source: {t.source}.*")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


HTML_STYLE = ("body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}"
              "table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}"
              "th{background:#f3f3f3}.source{color:#666;font-size:.85rem}img{max-width:100%;display:block;margin:1rem 0}code{background:#f3f3f3}")


def to_html(blocks: list[Block], title: str) -> str:
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{_inline_html(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{_inline_html(block[1])}</p>")
        elif kind == "img":
            body.append(f'<img src="{html.escape(block[1])}" alt="{html.escape(block[2])}">')
        elif kind == "table":
            t: Table = block[1]
            head = "".join(f"<th>{_inline_html(h)}</th>" for h in t.headers)
            rows = "".join("<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in row) + "</tr>" for row in t.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
                        f'<p class="source">Source: {_inline_html(t.source)}.</p>')
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{HTML_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


# ---------------------------------------------------------------- plots


def _color(labels: list[str], label: str) -> str:
    """The same colour for a label in every plot."""
    return f"C{labels.index(label) % 10}"


def _plot(results: Results, out_dir: Path) -> dict[str, Path]:
    # No pyplot: no global backend state; Figure.savefig renders PNG with Agg.
    from matplotlib.figure import Figure

    paths: dict[str, Path] = {}
    labels, batches = results.labels, results.batch_sizes
    for key, ylabel, values in (("tok_s", "output tok/s", results.tok_s), ("speedup", "speedup vs baseline", results.speedup)):
        fig = Figure(figsize=(7, 4.2), dpi=110)
        ax = fig.subplots()
        for label in labels:
            pts = [(b, values(label, b)) for b in results.batches_of(label)]
            pts = [(b, v) for b, v in pts if v is not None]
            if pts and not (key == "speedup" and results.is_baseline(label)):
                ax.plot([b for b, _ in pts], [v for _, v in pts], marker="o", label=label, color=_color(labels, label))
        if key == "speedup":
            ax.axhline(1.0, color="grey", linestyle="--", label="baseline = 1")
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch size (concurrent requests)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} by batch size (results.jsonl: cell.tok_s)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        fig.tight_layout()
        paths[key] = out_dir / PLOT_FILES[key]
        fig.savefig(paths[key], format="png")
    spec = [lab for lab in labels if not results.is_baseline(lab)]
    domains = _domains(results, "acceptance_by_domain")
    if spec:
        fig = Figure(figsize=(7, 4.2), dpi=110)
        ax = fig.subplots()
        groups = domains + ["all"]
        width = 0.8 / len(spec)
        for i, label in enumerate(spec):
            cell = _acceptance_cell(results, label)
            vals = [(cell.get("acceptance_by_domain") or {}).get(d) for d in domains] + [cell.get("acceptance_rate")]
            xs = [g + (i - (len(spec) - 1) / 2) * width for g in range(len(groups))]
            ax.bar(xs, [math.nan if v is None else 100 * v for v in vals], width=width, label=label, color=_color(labels, label))
        ax.set_xticks(range(len(groups)), groups)
        ax.set_ylabel("acceptance rate (%)")
        ax.set_ylim(0, 100)
        ax.set_title("acceptance rate by domain (cell.acceptance_by_domain, smallest batch)")
        ax.legend()
        fig.tight_layout()
        paths["acceptance"] = out_dir / PLOT_FILES["acceptance"]
        fig.savefig(paths["acceptance"], format="png")
    return paths


# ---------------------------------------------------------------- entry points


def build_report(results_path: str | Path, out_dir: str | Path) -> dict[str, str]:
    """Write report.md, report.html and the PNG plots into ``out_dir``; returns {name: path}."""
    results = load_results(results_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = _plot(results, out)
    blocks = [b for b in _blocks(results) if b[0] != "img" or b[1] in {p.name for p in plots.values()}]
    md, page = out / "report.md", out / "report.html"
    md.write_text(to_markdown(blocks))
    page.write_text(to_html(blocks, f"speculab benchmark report — run {(results.run or {}).get('run_id', DASH)}"))
    return {"report_md": str(md), "report_html": str(page), **{f"plot_{k}": str(p) for k, p in plots.items()}}


def summary(results_path: str | Path) -> dict[str, Any]:
    """Per label and batch size: tok_s, speedup, tau, acceptance_rate; plus each label's break-even. JSON-serialisable."""
    results = load_results(results_path)
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    breaks: dict[str, dict[str, Any]] = {}
    for label in results.labels:
        cells[label] = {
            str(b): {"tok_s": results.tok_s(label, b), "speedup": results.speedup(label, b),
                     "tau": results.cells[(label, b)].get("tau"), "acceptance_rate": results.cells[(label, b)].get("acceptance_rate")}
            for b in results.batches_of(label)
        }
        if not results.is_baseline(label):
            be = break_even([(b, results.speedup(label, b)) for b in results.batches_of(label)])
            breaks[label] = {"last_faster": be.last_faster, "first_slower": be.first_slower, "crossing": be.crossing}
    return {"run_id": (results.run or {}).get("run_id"), "baseline": results.baseline_label, "cells": cells, "break_even": breaks}
