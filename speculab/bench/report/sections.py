"""The report as typed blocks, in order: testbed and Methods, decision matrix, acceptance, speed, context length,
policies, agreement, memory, findings. The longer sections have their own modules (``*_section.py``).

Knows: which results.jsonl fields each table shows (named under it); every method by its short label
(``labels.py``); with several contexts, each by its name (``numbers.context_name``), the acceptance figures being the
first context's. Does not know: rendering.
"""

from __future__ import annotations

from typing import Any

from speculab.bench.report.acceptance_section import acceptance_pass_blocks
from speculab.bench.report.agreement_section import agreement_blocks
from speculab.bench.report.blocks import Block, Heading, Image, Paragraph, Table
from speculab.bench.report.contexts_section import context_blocks
from speculab.bench.report.findings import best_use, break_even, break_even_text, recommendation
from speculab.bench.report.not_run_section import not_run_blocks
from speculab.bench.report.numbers import DASH, context_name, count, nearest, num, pct, size, tok_x
from speculab.bench.report.plots import PLOT_FILES
from speculab.bench.report.policy_section import policy_blocks
from speculab.bench.report.results import ACCEPTANCE_DEFINITION, BASELINE_METHOD, Results, acceptance_cell, domains_of
from speculab.bench.report.speed_section import run_timing, speed_blocks
from speculab.bench.report.testbed_section import methods_blocks, testbed_blocks


def _memory_summary(mem: dict[str, Any] | None) -> str:
    if not mem:
        return DASH
    return f"{size(mem.get('drafter_weights_bytes'))} weights + {size(mem.get('drafter_kv_bytes_per_token'))}/token KV"


def _at_first_context(results: Results) -> str:
    """Where a run has several contexts, the acceptance figures are its first's: said after their source."""
    return f" at context {context_name(results, results.context)}" if results.several_contexts else ""


def _speed_columns(results: Results) -> list[tuple[str, Results, int]]:
    """The decision matrix's speed columns: (header, context's view, batch size) at batch 1 and 8 or the nearest
    measured, at every context (each context's own batch sizes: a context may run fewer)."""

    def ends(batch_sizes: list[int]) -> list[int]:
        low, high = nearest(batch_sizes, 1), nearest(batch_sizes, 8)
        return [low] if high == low else [low, high]

    if not results.several_contexts:
        return [(f"tok/s at batch {b} (speedup)", results, b) for b in ends(results.all_batch_sizes)]
    return [(f"tok/s at batch {b}, {context_name(results, v.context)} (speedup)", v, b) for v in results.views for b in ends(v.batch_sizes)]


def _decision_blocks(results: Results) -> list[Block]:
    if not results.all_cells:
        return [Heading(2, "Executive decision matrix"), Paragraph("No measured cells in results.jsonl.")]
    columns = _speed_columns(results)
    headers = ["Method", *(h for h, _, _ in columns), "Acceptance rate", "Mean τ", "Drafter memory", "Best use (from the numbers)"]
    rows = []
    for label in results.labels:
        cell = acceptance_cell(results, label)
        row = [results.short(label), *(tok_x(view, label, b) for _, view, b in columns)]
        is_base = results.is_baseline(label)
        mem = results.memory(label)
        row += [
            "n/a" if is_base else pct(cell.get("acceptance_rate")),
            num(cell.get("tau"), 2),
            "0" if is_base and not (mem or {}).get("drafter_weights_bytes") else _memory_summary(mem),
            best_use(results, label),
        ]
        rows.append(row)
    same = " and context" if results.several_contexts else ""
    source = (
        f"`cell.tok_s`; in brackets the speedup over its engine's baseline at the same batch size{same}, measured as the "
        "sentence below says; `cell.acceptance_rate` and "
        f"`cell.tau` of each label's smallest measured batch size{_at_first_context(results)}; memory: "
        "`run.memory[method].drafter_weights_bytes` and `.drafter_kv_bytes_per_token`; best use: batch sizes where speedup > 1 "
        f"and where the label has the highest tok/s{', at each context' if same else ''}"
    )
    return [
        Heading(2, "Executive decision matrix"),
        Table(headers, rows, source),
        Paragraph(run_timing(results).text),
        Paragraph(ACCEPTANCE_DEFINITION),
    ]


def _acceptance_blocks(results: Results) -> list[Block]:
    spec = [lab for lab in results.labels if not results.is_baseline(lab)]
    blocks: list[Block] = [Heading(2, "Acceptance in the timed cells")]
    for key, overall, fmt, title in (
        ("acceptance_by_domain", "acceptance_rate", pct, "Acceptance rate"),
        ("tau_by_domain", "tau", lambda v: num(v, 2), "Mean τ"),
    ):
        domains = domains_of(results, key)
        rows = []
        for lab in spec:
            cell = acceptance_cell(results, lab)
            rows.append(
                [
                    results.short(lab),
                    str(cell.get("batch_size", DASH)),
                    *(fmt((cell.get(key) or {}).get(d)) for d in domains),
                    fmt(cell.get(overall)),
                ]
            )
        blocks.append(
            Table(
                [f"{title}: method", "batch", *domains, "all"],
                rows,
                f"`cell.{key}` and `cell.{overall}` at each label's smallest batch size{_at_first_context(results)}",
            )
        )
    if spec and not results.acceptance:  # with an acceptance pass, the plot shows the pass's figures, beside its table
        blocks.append(Image(PLOT_FILES["acceptance"], "Acceptance rate by language (timed cells: no acceptance pass in this run)"))
    return blocks + _depth_blocks(results, spec)


def _depth_blocks(results: Results, spec: list[str]) -> list[Block]:
    """Acceptance at each draft depth given the depth before was accepted: where τ is lost."""
    cells = {lab: acceptance_cell(results, lab) for lab in spec}
    cells = {lab: c for lab, c in cells.items() if c.get("reached_per_position")}
    if not cells:
        return []
    depth = max(len(c["reached_per_position"]) for c in cells.values())
    rows = []
    for lab, c in cells.items():
        accepted, reached = c.get("accepted_per_position") or [], c["reached_per_position"]
        row = [results.short(lab), str(c.get("batch_size", DASH))]
        for d in range(depth):
            got = accepted[d] if d < len(accepted) else 0
            row.append(f"{got / reached[d]:.2f} ({got}/{reached[d]})" if d < len(reached) and reached[d] else DASH)
        rows.append(row)
    source = (
        f"`cell.accepted_per_position[d]` / `cell.reached_per_position[d]` at each label's smallest batch size{_at_first_context(results)}"
    )
    note = (
        "Depth d is tested on the steps that drafted it and accepted every depth before it; the figure is the "
        "share of those steps that accepted depth d too. A drafter trained only on the target's true features "
        "falls off after depth 1; EAGLE-3's training-time test is meant to keep this near 0.6-0.7 at every depth."
    )
    headers = ["Method", "batch", *(f"depth {d + 1}" for d in range(depth))]
    return [Heading(3, "Acceptance by depth, given the depth before was accepted"), Table(headers, rows, source), Paragraph(note)]


def _memory_blocks(results: Results) -> list[Block]:
    stored = (results.run or {}).get("memory") or {}
    if not stored:
        return [Heading(2, "KV capacity"), Paragraph("No memory estimates in results.jsonl (`run.memory` is empty).")]
    base = stored.get(BASELINE_METHOD) or {}
    rows = []
    for method, m in stored.items():
        tokens, base_tokens = m.get("kv_capacity_tokens"), base.get("kv_capacity_tokens")
        change = f"{100 * (tokens / base_tokens - 1):+.1f}%" if tokens is not None and base_tokens else DASH
        rows.append(
            [
                results.short(method),
                str(m.get("drafter_kind") or "none"),
                count(m.get("drafter_parameters")),
                size(m.get("drafter_weights_bytes")),
                size(m.get("weights_bytes_per_device")),
                count(m.get("kv_bytes_per_token_per_device")),
                size(m.get("kv_free_bytes_per_device")),
                count(tokens),
                count(m.get("kv_capacity_sessions")),
                change,
            ]
        )
    any_m = next(iter(stored.values()))
    assumptions = (
        f"Analytic estimates (speculab.models.memory): device memory {size(any_m.get('device_bytes'))} × utilisation "
        f"{any_m.get('memory_utilization')}, overhead {size(any_m.get('overhead_bytes_per_device'))} per device, tensor parallel "
        f"{any_m.get('tensor_parallel')}, target weights {any_m.get('target_weight_format')}, KV {any_m.get('kv_dtype_bytes')} bytes per value; "
        f"sessions are whole sessions of {any_m.get('session_tokens')} tokens."
    )
    headers = [
        "method",
        "drafter",
        "drafter params",
        "drafter weights",
        "weights per device",
        "KV bytes/token per device",
        "KV free per device",
        "KV capacity tokens",
        "sessions",
        "tokens vs baseline",
    ]
    source = (
        "`run.memory[method]`: drafter_parameters, drafter_weights_bytes, weights_bytes_per_device, kv_bytes_per_token_per_device, "
        "kv_free_bytes_per_device, kv_capacity_tokens, kv_capacity_sessions"
    )
    return [Heading(2, "KV capacity"), Table(headers, rows, source), Paragraph(assumptions)]


def _findings_blocks(results: Results) -> list[Block]:
    several = results.several_contexts
    rows = []
    for label in results.labels:
        if results.is_baseline(label):
            continue
        for view in results.views if several else [results]:
            be = break_even([(b, view.speedup(label, b)) for b in view.batches_of(label)])
            where = [context_name(results, view.context)] if several else []
            figures = [count(be.last_faster), count(be.first_slower), num(be.crossing, 1), break_even_text(view, label, be)]
            rows.append([results.short(label), *where, *figures])
    blocks: list[Block] = [Heading(2, "Findings")]
    headers = ["method", *(["context"] if several else [])]
    headers += ["largest batch with speedup ≥ 1", "first batch with speedup < 1", "break-even (interpolated)", "reading"]
    blocks.append(
        Table(
            headers,
            rows,
            "the speedups of the speed table"
            + ("s, each context's" if several else "")
            + " (`cell.tok_s`, measured as said there); break-even interpolated linearly in log2(batch)",
        )
    )
    blocks += [Paragraph(text) for text in recommendation(results)]
    differs = [
        f"{results.short(lab)} at batch {b}" + (f" ({context_name(results, ctx)})" if several else "")
        for (lab, b, ctx), c in results.all_cells.items()
        if c.get("greedy_identical") is False and not c.get("all_near_ties")
    ]
    if differs:
        blocks.append(
            Paragraph(
                "**Correctness warning:** at temperature 0 the output differed from the baseline's (`cell.greedy_identical` false) for "
                + ", ".join(differs)
                + "."
            )
        )
    if results.skipped_lines:
        blocks.append(Paragraph(f"Skipped unreadable results.jsonl lines: {', '.join(map(str, results.skipped_lines))}."))
    return blocks


def document(results: Results) -> list[Block]:
    run_id = (results.run or {}).get("run_id", DASH)
    return [
        Heading(1, f"speculab benchmark report — run {run_id}"),
        Paragraph("Generated from results.jsonl only; each table names the fields its numbers come from."),
        *testbed_blocks(results),
        *methods_blocks(results),
        *_decision_blocks(results),
        *acceptance_pass_blocks(results),
        *_acceptance_blocks(results),
        *speed_blocks(results),
        *context_blocks(results),
        *policy_blocks(results),
        *agreement_blocks(results),
        *_memory_blocks(results),
        *not_run_blocks(results),
        *_findings_blocks(results),
    ]
