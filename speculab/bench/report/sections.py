"""The report's sections, as typed blocks: testbed, decision matrix, acceptance, speed, memory, findings.

Knows: which results.jsonl fields each table shows (named under it). Does not know: rendering.
"""

from __future__ import annotations

import json
from typing import Any

from speculab.bench.report.acceptance_section import acceptance_pass_blocks
from speculab.bench.report.blocks import Block, Heading, Image, Paragraph, Table
from speculab.bench.report.findings import best_use, break_even, break_even_text, recommendation
from speculab.bench.report.numbers import DASH, count, ms, nearest, num, pct, size, tok_x
from speculab.bench.report.plots import PLOT_FILES
from speculab.bench.report.policy_section import policy_blocks
from speculab.bench.report.results import ACCEPTANCE_DEFINITION, BASELINE_METHOD, Results, acceptance_cell, domains_of


def _testbed_blocks(results: Results) -> list[Block]:
    run = results.run or {}
    tb, cfg, models = run.get("testbed") or {}, run.get("config") or {}, run.get("models") or {}
    ram = tb.get("ram_bytes")
    rows = [
        [k, DASH if v is None else str(v)]
        for k, v in (
            ("OS", tb.get("os")),
            ("Kernel", tb.get("kernel")),
            ("CPU", tb.get("cpu")),
            ("RAM", f"{size(ram)} ({ram:,} bytes)" if isinstance(ram, int) else ram),
            ("GPU", tb.get("gpu") or "none"),
            ("Python", tb.get("python")),
            ("torch", tb.get("torch")),
            ("speculab", tb.get("speculab")),
        )
    ]
    model_rows = []
    if models.get("target"):
        model_rows.append(["target", *(str(models["target"].get(k, DASH)) for k in ("id", "path", "sha256"))])
    for method, m in (models.get("drafters") or {}).items():
        model_rows.append([f"drafter ({method})", *(str(m.get(k, DASH)) for k in ("id", "path", "sha256"))])
    cfg_rows = [[k, json.dumps(cfg[k]) if isinstance(cfg[k], (list, dict)) else str(cfg[k])] for k in cfg]
    blocks: list[Block] = [Heading(2, "Testbed"), Table(["Field", "Value"], rows, "`run.testbed`")]
    if model_rows:
        blocks.append(Table(["Role", "Model id", "Path", "sha256"], model_rows, "`run.models`"))
    engines = [
        [
            label,
            results.engine_of(label),
            str(c.get("engine_version") or tb.get("speculab") or DASH),
            str(c.get("endpoint") or DASH),
            f"`{c['server_command']}`" if c.get("server_command") else DASH,
        ]
        for label in results.labels
        for c in [acceptance_cell(results, label)]
    ]
    if any(e[1] != "speculab (in-process)" for e in engines):
        blocks.append(
            Table(
                ["Label", "Engine", "Version", "Endpoint", "Server command"],
                engines,
                "`cell.engine`, `cell.transport`, `cell.engine_version`, `cell.endpoint`, `cell.server_command`; "
                "each label's speedup is over its own engine's baseline",
            )
        )
    if cfg_rows:
        blocks.append(
            Table(
                ["Setting", "Value"], [["run_id", str(run.get("run_id"))], ["started", str(run.get("started"))], *cfg_rows], "`run.config`"
            )
        )
    return blocks


def _memory_summary(mem: dict[str, Any] | None) -> str:
    if not mem:
        return DASH
    return f"{size(mem.get('drafter_weights_bytes'))} weights + {size(mem.get('drafter_kv_bytes_per_token'))}/token KV"


def _decision_blocks(results: Results) -> list[Block]:
    if not results.cells:
        return [Heading(2, "Executive decision matrix"), Paragraph("No measured cells in results.jsonl.")]
    low, high = nearest(results.batch_sizes, 1), nearest(results.batch_sizes, 8)
    headers = ["Method", f"tok/s at batch {low} (speedup)"]
    if high != low:
        headers.append(f"tok/s at batch {high} (speedup)")
    headers += ["Acceptance rate", "Mean τ", "Drafter memory", "Best use (from the numbers)"]
    rows = []
    for label in results.labels:
        cell = acceptance_cell(results, label)
        row = [label, tok_x(results, label, low)] + ([tok_x(results, label, high)] if high != low else [])
        is_base = results.is_baseline(label)
        mem = results.memory(label)
        row += [
            "n/a" if is_base else pct(cell.get("acceptance_rate")),
            num(cell.get("tau"), 2),
            "0" if is_base and not (mem or {}).get("drafter_weights_bytes") else _memory_summary(mem),
            best_use(results, label),
        ]
        rows.append(row)
    source = (
        "`cell.tok_s`; speedup = tok_s / its engine's baseline tok_s at the same batch size, in brackets the slowest and "
        "fastest of `cell.tok_s_repeats` over that baseline; `cell.acceptance_rate` and "
        "`cell.tau` of each label's smallest measured batch size; memory: `run.memory[method].drafter_weights_bytes`"
        " and `.drafter_kv_bytes_per_token`; best use: batch sizes where speedup > 1 and where the label has the highest tok/s"
    )
    return [Heading(2, "Executive decision matrix"), Table(headers, rows, source), Paragraph(ACCEPTANCE_DEFINITION)]


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
                [lab, str(cell.get("batch_size", DASH)), *(fmt((cell.get(key) or {}).get(d)) for d in domains), fmt(cell.get(overall))]
            )
        blocks.append(
            Table(
                [f"{title}: method", "batch", *domains, "all"],
                rows,
                f"`cell.{key}` and `cell.{overall}` at each label's smallest batch size",
            )
        )
    if spec:
        blocks.append(Image(PLOT_FILES["acceptance"], "Acceptance rate by domain"))
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
        row = [lab, str(c.get("batch_size", DASH))]
        for d in range(depth):
            got = accepted[d] if d < len(accepted) else 0
            row.append(f"{got / reached[d]:.2f} ({got}/{reached[d]})" if d < len(reached) and reached[d] else DASH)
        rows.append(row)
    source = "`cell.accepted_per_position[d]` / `cell.reached_per_position[d]` at each label's smallest batch size"
    note = (
        "Depth d is tested on the steps that drafted it and accepted every depth before it; the figure is the "
        "share of those steps that accepted depth d too. A drafter trained only on the target's true features "
        "falls off after depth 1; EAGLE-3's training-time test is meant to keep this near 0.6-0.7 at every depth."
    )
    headers = ["Method", "batch", *(f"depth {d + 1}" for d in range(depth))]
    return [Heading(3, "Acceptance by depth, given the depth before was accepted"), Table(headers, rows, source), Paragraph(note)]


def _speed_blocks(results: Results) -> list[Block]:
    labels = results.labels
    rows = [[str(b), *(tok_x(results, lab, b) for lab in labels)] for b in results.batch_sizes]
    detail = []
    for lab, b in sorted(results.cells, key=lambda k: (labels.index(k[0]), k[1])):
        c = results.cells[(lab, b)]
        gi = c.get("greedy_identical")
        detail.append(
            [
                lab,
                str(b),
                count(c.get("num_prompts")),
                count(c.get("repeats")),
                count(c.get("output_tokens")),
                num(c.get("wall_s"), 2),
                num(c.get("tok_s")),
                num(c.get("tok_s_per_request"), 2),
                ms(c.get("ttft_p50_s")),
                ms(c.get("ttft_p99_s")),
                ms(c.get("queue_p50_s")),
                ms(c.get("tpot_p50_s")),
                ms(c.get("tpot_p99_s")),
                ms(c.get("itl_p50_s")),
                ms(c.get("itl_p99_s")),
                num(c.get("tau"), 2),
                pct(c.get("acceptance_rate")),
                size(c.get("peak_rss_bytes")),
                DASH if gi is None else ("yes" if gi else "NO"),
                pct(c.get("agreement")),
            ]
        )
    detail_headers = [
        "label",
        "batch",
        "prompts",
        "repeats",
        "output tokens",
        "wall s",
        "tok/s",
        "tok/s/request",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "queue p50 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "ITL p50 ms",
        "ITL p99 ms",
        "τ",
        "acceptance",
        "peak RSS",
        "greedy identical",
        "agreement",
    ]
    return [
        Heading(2, "Speed vs concurrency"),
        Table(
            ["batch", *labels],
            rows,
            "`cell.tok_s` (output tok/s, median over repeats); in parentheses tok_s / baseline tok_s at that batch size, "
            "then the slowest and fastest repeat (`cell.tok_s_repeats`) over the same baseline; each batch size's "
            "prompts: the detail table (`run.prompts_per_batch`, sized to the run's time budget)",
        ),
        Image(PLOT_FILES["tok_s"], "Output tok/s vs batch size"),
        Image(PLOT_FILES["speedup"], "Speedup vs batch size"),
        Heading(3, "Every cell"),
        Table(detail_headers, detail, "the `cell` record of each (label, batch_size), the same-named fields; latencies in ms"),
    ]


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
                method,
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
    rows = []
    for label in results.labels:
        if results.is_baseline(label):
            continue
        be = break_even([(b, results.speedup(label, b)) for b in results.batches_of(label)])
        rows.append([label, count(be.last_faster), count(be.first_slower), num(be.crossing, 1), break_even_text(results, label, be)])
    blocks: list[Block] = [Heading(2, "Findings")]
    blocks.append(
        Table(
            ["method", "largest batch with speedup ≥ 1", "first batch with speedup < 1", "break-even (interpolated)", "reading"],
            rows,
            "speedup = `cell.tok_s` / baseline `cell.tok_s` at the same batch size; break-even interpolated linearly in log2(batch)",
        )
    )
    blocks.append(Paragraph(recommendation(results)))
    differs = [
        f"{lab} at batch {b}" for (lab, b), c in results.cells.items() if c.get("greedy_identical") is False and not c.get("all_near_ties")
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


def _agreement_blocks(results: Results) -> list[Block]:
    """Engines' greedy outputs against their own baseline and against speculab's; each divergence's gap on the target."""
    rows = []
    for (label, b), c in results.cells.items():
        if not (
            c.get("divergences")
            or c.get("speculab_divergences")
            or c.get("transport") == "http"
            and (c.get("agreement") is not None or c.get("agreement_with_speculab") is not None)
        ):
            continue
        own = c.get("divergences") or []
        ours = c.get("speculab_divergences") or []
        gaps = [abs(d["logprob_gap"]) for d in own + ours]
        # both runs' gaps between the two chosen tokens there (records older than that kept top-1 minus top-2)
        margins = [m for d in own if d.get("chosen_gaps") or d.get("margins") for m in d.get("chosen_gaps") or d["margins"]]
        bounds = [d["bound"] for d in own + ours if "bound" in d]
        rows.append(
            [
                label,
                str(b),
                DASH if c.get("greedy_identical") is None else ("yes" if c["greedy_identical"] else "no"),
                pct(c.get("agreement")),
                DASH if c.get("identical_to_speculab") is None else ("yes" if c["identical_to_speculab"] else "no"),
                pct(c.get("agreement_with_speculab")),
                str(len(own) + len(ours)),
                DASH if not gaps else f"{max(gaps):.4f}",
                DASH if not margins else f"{max(margins):.3f}",
                DASH if not bounds else f"{min(bounds):.3f}",
                DASH if not gaps else ("yes" if all(d["near_tie"] for d in own + ours) else "NO"),
            ]
        )
    if not rows:
        return []
    return [
        Heading(2, "Greedy agreement: across engines, and where outputs part"),
        Table(
            [
                "label",
                "batch",
                "identical to its engine's baseline",
                "agreement",
                "baseline identical to speculab's",
                "agreement with speculab",
                "divergences",
                "max |log-prob gap| (nats)",
                "max chosen-token gap, both runs",
                "near-tie bound",
                "all near-ties",
            ],
            rows,
            "`cell.greedy_identical`, `cell.agreement`, `cell.identical_to_speculab`, `cell.agreement_with_speculab`, "
            "`cell.divergences` / `cell.speculab_divergences`: where outputs part, the gap between the two tokens on the "
            "target recomputed, and (in-process) the logit gap each run's target saw there between its own choice and the other "
            "run's. A near-tie: both gaps (or, for HTTP engines, the recomputed gap) under the bound rounding allows in the run's dtype "
            "(`bench/divergence.near_tie_bound`: 0.05 nats in fp32, 18 unit roundoffs of the top logit in bf16). Outputs that part only at "
            "near-ties differ by rounding, not by a bug; `--dtype float32` gives outputs identical to plain decoding.",
        ),
    ]


def document(results: Results) -> list[Block]:
    run_id = (results.run or {}).get("run_id", DASH)
    return [
        Heading(1, f"speculab benchmark report — run {run_id}"),
        Paragraph("Generated from results.jsonl only; each table names the fields its numbers come from."),
        *_testbed_blocks(results),
        *_decision_blocks(results),
        *acceptance_pass_blocks(results),
        *_acceptance_blocks(results),
        *_speed_blocks(results),
        *policy_blocks(results),
        *_agreement_blocks(results),
        *_memory_blocks(results),
        *_findings_blocks(results),
    ]
