"""``speculab tune``'s tables: predicted tok/s per batch size and draft budget, the choice, its check, a table per
context the tune measured; the policy and the engines' settings."""

from __future__ import annotations

import sys

from speculab.tune.contexts import context_parts


def print_report(record: dict, out=None) -> None:
    out = out or sys.stdout  # looked up now: a test's captured stdout, not the one at import
    print(
        f"{record['method']} on {record['testbed']['cpu']} ({record['dtype']}, KV cache {record['kv_dtype']}, {record['linear_kernels']})",
        file=out,
    )
    parts = context_parts(record)
    for key, part in parts.items():
        if "contexts" in record:
            print(
                f"context {key}: prompts of {part['context_tokens']} tokens (median), its rules from {part['from_context_len']} "
                "tokens of context",
                file=out,
            )
        _print_table(part, record["budgets"], out)
    print("chosen: the smallest draft budget within one standard error of the best prediction (in the costs file)", file=out)
    rules = ", ".join(
        f"from batch {r['batch_size']}"
        + (f" and {r['context_len']} tokens of context" if r.get("context_len") else "")
        + f": {r['draft_nodes']}"
        for r in record["policy"]["draft_budget"]
    )
    print(f"policy: {rules} (draft nodes a request; 0 = plain decoding)", file=out)
    for key, part in parts.items():
        at = f" at {key}" if "contexts" in record else ""
        for b, why in (part.get("skipped_batch_sizes") or {}).items():
            print(f"batch {b}{at} not measured: {why}; the policy's rule below it holds there", file=out)
        if part.get("corrected"):
            print(
                f"the check measured the policy below plain decoding{at} at batch sizes {part['corrected']}: plain decoding there", file=out
            )
    for engine, said in record["engines"].items():
        print(f"{engine} {said['version']} ({said['basis']}): {said['settings']}", file=out)
        for name, text in said["files"].items():
            print(f"  {name}: {text}", file=out)
        for note in said["notes"]:
            print(f"  note: {note}", file=out)
    print(f"written: {record['policy_file']} (--policy auto reads it) and {record['costs_file']}", file=out)


def _print_table(part: dict, budgets: list[int], out) -> None:
    """One context's tau by budget, and its table: a row per batch size."""
    cells, tau = part["cost_model"]["cells"], part["cost_model"]["acceptance"]["tau"]
    print("tokens a step (tau) by draft budget: " + ", ".join(f"{c}: {tau[str(c)]:.2f}" for c in budgets if str(c) in tau), file=out)
    print(
        f"{'batch':>5s}  " + "  ".join(f"{'budget ' + str(c):>14s}" for c in budgets) + f"  {'chosen':>6s}  {'checked':>9s}  {'error':>6s}",
        file=out,
    )
    for b in part["batch_sizes"]:
        row = {c["budget"]: c for c in cells if c["batch_size"] == b}
        shown = [f"{row[c]['predicted_tok_s']:7.1f} ({row[c]['step_ms']:4.0f}ms)" if c in row else f"{'-':>14s}" for c in budgets]
        chosen = part["chosen"].get(str(b), "-")
        check = part["check"].get(str(b))
        checked = (
            f"{check['tok_s']:9.1f}  {100 * check['error']:+5.1f}%" if check and check["error"] is not None else f"{'-':>9s}  {'-':>6s}"
        )
        print(f"{b:5d}  " + "  ".join(shown) + f"  {chosen:>6}  {checked}", file=out)


def print_engine_report(record: dict, out=None) -> None:
    """``tune --engine vllm``'s table: each batch size's tok/s at every fixed k, the choice, and its check."""
    out = out or sys.stdout
    ks = sorted({int(k) for row in record["sweep"].values() for k in row})
    flags = " ".join(record["testbed"].get("cpu_flags", []))
    print(
        f"{record['method']} on {record['engine']} {record['launch'].get('version', '')}, {record['testbed'].get('cpu')} ({flags})",
        file=out,
    )
    print("output tok/s, the median of passes ± its standard error", file=out)
    head = "  ".join(f"{'k=' + str(k):>13s}" for k in ks)
    print(
        f"{'batch':>5s}  {head}  {'chosen':>6s}  {'checked':>13s}  {'predicted':>13s}  {'vs plain':>8s}  {'vs best':>7s}  {'error':>6s}  "
        f"{'vs sweep':>8s}",
        file=out,
    )
    for b, row in record["sweep"].items():
        c = record["check"][b]
        shown = "  ".join(f"{row[str(k)]['tok_s']:7.1f} ±{row[str(k)]['se']:4.1f}" if str(k) in row else f"{'-':>13s}" for k in ks)
        checked = f"{c['checked']['tok_s']:7.1f} ±{c['checked']['se']:4.1f}  {c['predicted']['tok_s']:7.1f} ±{c['predicted']['se']:4.1f}"
        ratios = f"{c['vs_plain']:7.2f}x  {c['vs_best_fixed']:6.2f}x  {100 * c['error']:+5.1f}%  {100 * c.get('error_vs_sweep', c['error']):+7.1f}%"
        print(f"{int(b):5d}  {shown}  {c['chosen_k']:>6}  {checked}  {ratios}", file=out)
    print("chosen: the smallest k within one standard error of the best; checked: vLLM relaunched with the policy;", file=out)
    print(
        "predicted: the chosen k's tok/s, measured again beside the check where it took turns with it "
        "(then plain and best too); vs sweep: the check against the sweep's cell of the chosen k, minutes earlier",
        file=out,
    )
    if any(record["chosen"].values()):
        print(f"num_speculative_tokens_per_batch_size: {record['per_batch_size']}", file=out)
    options = record.get("drafting_or_plain")
    if options and any(options["drafting"].values()):
        print(
            f"speculation is on or off for the whole server: drafting {options['drafting']} would fall up to "
            f"{options['drafting_worst_loss']:.2f}x below the best at its worst batch size, plain decoding up to "
            f"{options['plain_worst_loss']:.2f}x: {'drafting' if any(record['chosen'].values()) else 'plain decoding'} chosen",
            file=out,
        )
    if record.get("plain_faster_at") and any(record["chosen"].values()):
        print(
            f"at batch sizes {record['plain_faster_at']} vLLM without --speculative-config is faster than the policy beyond the "
            "spread (vLLM cannot switch speculation off inside it): at such loads, serve plainly",
            file=out,
        )
    config = next((f["value"] for f in record["launch"].get("flags", []) if f["flag"] == "--speculative-config"), None)
    print(f"vllm --speculative-config '{config}'" if config else f"vllm: {record['launch']['command']}", file=out)
    serve = f"; serve with: speculab launch vllm --method {record['launch']['method']}" if "method" in record["launch"] else ""
    print(f"written: {record['policy_file']}, {record.get('report_md', '')}{serve}", file=out)
