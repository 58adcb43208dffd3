"""``speculab tune``'s table: predicted tok/s per batch size and cap, the choice, its check, the engines' settings."""

from __future__ import annotations

import sys


def print_report(record: dict, out=None) -> None:
    out = out or sys.stdout  # looked up now: a test's captured stdout, not the one at import
    cells, caps = record["cost_model"]["cells"], record["caps"]
    tau = record["cost_model"]["acceptance"]["tau"]
    print(
        f"{record['method']} on {record['testbed']['cpu']} ({record['dtype']}, KV cache {record['kv_dtype']}, {record['linear_kernels']})",
        file=out,
    )
    print("tokens a step (tau) by cap: " + ", ".join(f"{c}: {tau[str(c)]:.2f}" for c in caps if str(c) in tau), file=out)
    print(
        f"{'batch':>5s}  " + "  ".join(f"{'cap ' + str(c):>14s}" for c in caps) + f"  {'chosen':>6s}  {'checked':>9s}  {'error':>6s}",
        file=out,
    )
    for b in record["batch_sizes"]:
        row = {c["cap"]: c for c in cells if c["batch_size"] == b}
        shown = [f"{row[c]['predicted_tok_s']:7.1f} ({row[c]['step_ms']:4.0f}ms)" if c in row else f"{'-':>14s}" for c in caps]
        chosen = record["chosen"].get(str(b), "-")
        check = record["check"].get(str(b))
        checked = (
            f"{check['tok_s']:9.1f}  {100 * check['error']:+5.1f}%" if check and check["error"] is not None else f"{'-':>9s}  {'-':>6s}"
        )
        print(f"{b:5d}  " + "  ".join(shown) + f"  {chosen:>6}  {checked}", file=out)
    print("chosen: the smallest cap within one standard error of the best prediction (in the costs file)", file=out)
    print(f"policy: {record['policy']['by_batch_size']} (smallest batch size: most draft nodes a request; 0 = plain)", file=out)
    for engine, said in record["engines"].items():
        print(f"{engine}: {said['settings']}" + (f"  (cannot express: {said['cannot']})" if said.get("cannot") else ""), file=out)
    print(f"written: {record['policy_file']} (--policy auto reads it) and {record['costs_file']}", file=out)
