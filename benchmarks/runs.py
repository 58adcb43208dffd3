"""Runs set against runs: two ``speculab bench`` runs' speedups, an older commit's kernels against this checkout's,
and a method held by its policy at 0 draft nodes against the baseline.

Subcommands (``--help`` on each says more):
- ``reruns``: do two runs of ``speculab bench`` agree? Each method's speedup at each batch size, side by side;
- ``commits``: before and after a change to the kernels: an older commit against this checkout, paired;
- ``policy-at-zero``: a method held at 0 draft nodes against the baseline at one batch size, their engines in turns.
Knows: on this project's virtual machines the speed moves by 10-25% within minutes, so two things compared are timed
alternately and the ratio taken pair by pair (``reruns`` reads finished runs and trusts their own rounds).
Does not know: why two runs differ, what changed between commits.
Usage: python benchmarks/runs.py COMMAND [options]. The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import CONTEXT, attention_ms, command_line, measure_runs, run_subcommand, spread, subcommand

# speculab is imported in the functions that use it: a ``commits`` child runs this file with an older commit's
# speculab first on the path, which may lack any module but the few its cells need

REPO = Path(__file__).resolve().parent.parent
COMMIT_CELLS = [(1, 1), (1, 4), (1, 8), (1, 16), (16, 1), (16, 4)]
HELD = "eagle"  # make bench's EAGLE row: its tree (3, 2, 4) under policy shared:4


def rerun_pairs(path_a: str, path_b: str) -> list[dict]:
    """(label, batch size, speedup in A, speedup in B, B / A) for every speculative cell both runs have."""
    from speculab.bench.report.results import load_results

    a, b = load_results(path_a), load_results(path_b)
    found = []
    for label in a.labels:
        if a.is_baseline(label) or label not in b.labels:
            continue
        for batch in a.batches_of(label):
            sa, sb = a.measured_speedup(label, batch), b.measured_speedup(label, batch)
            if sa is None or sb is None:
                continue
            found.append(
                {
                    "label": a.short(label),
                    "batch_size": batch,
                    "a": round(sa.value, 3),
                    "b": round(sb.value, 3),
                    "a_range": [sa.low, sa.high],
                    "b_range": [sb.low, sb.high],
                    "b_over_a": round(sb.value / sa.value, 3),
                }
            )
    return found


def reruns(args) -> None:
    """Do two runs of ``speculab bench`` agree? Each method's speedup at each batch size, side by side.

    A and B are two ``results.jsonl`` (e.g. two ``make bench`` runs of one commit on one machine). For every method
    and batch size both runs measured, the speedup over the baseline as the report computes it
    (``speculab.bench.report``: the median of per-round ratios where the cells ran in rounds), and B's over A's. The
    JSON: every pair, the largest disagreement, and whether every pair at the batch sizes checked (default: the
    smallest and the largest) is within the tolerance. Knows: the report's speedup. Does not know: how the runs were
    made.
    """
    found = rerun_pairs(args.a, args.b)
    sizes = sorted({p["batch_size"] for p in found})
    checked = set(args.batch_sizes) if args.batch_sizes else {sizes[0], sizes[-1]} if sizes else set()
    for p in found:
        mark = "checked" if p["batch_size"] in checked else ""
        print(f"{p['label']:>16s} b{p['batch_size']:<3d} A {p['a']:.3f}x  B {p['b']:.3f}x  B/A {p['b_over_a']:.3f} {mark}")
    within = [abs(p["b_over_a"] - 1) <= args.tolerance for p in found if p["batch_size"] in checked]
    worst = max((abs(p["b_over_a"] - 1) for p in found if p["batch_size"] in checked), default=None)
    summary = {"pairs": found, "checked_batch_sizes": sorted(checked), "tolerance": args.tolerance, "largest_disagreement": worst}
    print(json.dumps(summary | {"all_within": bool(within) and all(within)}))


def commit_cells(context: int) -> dict[str, float]:
    """In a child: ms of every cell after ``context`` tokens, with the speculab found first on the path."""
    from speculab.runtime import load

    model = load(None, "float32").model
    cells = {}
    for b in sorted({b for b, _ in COMMIT_CELLS}):
        runs = measure_runs(model, b, [q for bb, q in COMMIT_CELLS if bb == b], 5, context)
        cells |= {f"forward b{b} q{q}": statistics.median(t) for q, t in runs.items()}
    cells |= {f"attention b{b} q{q}": attention_ms(model, b, q, 5, context) for b, q in COMMIT_CELLS}
    return cells


def child(tree: Path, context: int) -> dict[str, float]:
    env = os.environ | {"PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, __file__, "commits", "--child", "--context", str(context)],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise RuntimeError(f"the cells failed with {tree} first on the path:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def paired_children(old: str, rounds: int, context: int) -> dict[str, list[dict]]:
    """Every cell's ms in each round, for a worktree of ``old`` and for this checkout, each built first."""
    from speculab.bench.turns import abba

    runs = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "old"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), old], check=True, capture_output=True)
        try:
            for source in (tree, REPO):  # build both first, so no build runs beside a measurement
                subprocess.run(  # not from the checkout's folder: `-m` puts the working directory first on the path
                    [sys.executable, "-m", "speculab.native"],
                    cwd=tempfile.gettempdir(),
                    env=os.environ | {"PYTHONPATH": str(source)},
                    check=True,
                )
            for i, name in abba(["old", "new"], rounds):
                runs[name].append(child(tree if name == "old" else REPO, context))
                print(f"round {i + 1}: {name} done", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    return runs


def commits(args) -> None:
    """Before and after a change to the kernels, on a machine whose speed drifts: an older commit against this checkout.

    Knows: how to build another commit's native kernels (a git worktree of it, ``python -m speculab.native`` with that
    tree first on the path) and how to set two builds side by side: child processes that alternate, old, new, new,
    old, ..., each measuring every cell, and the ratio taken pair by pair. Two builds cannot share one process: the
    second library's calls bind to the first one's symbols. Cells: a target forward over q new tokens per row after
    ``--context`` tokens of context (1,200 unless told; median of 5), and the attention alone over the model's 30
    layers' caches.
    Does not know: what changed between the commits.
    """
    if args.child:
        print(json.dumps(commit_cells(args.context)))
        return
    if args.old is None:
        sys.exit("runs.py commits: name the OLD commit")
    runs = paired_children(args.old, args.rounds, args.context)
    summary = {}
    for cell in runs["old"][0]:
        o, n = [r[cell] for r in runs["old"]], [r[cell] for r in runs["new"]]
        ratios = [b / a for a, b in zip(o, n)]
        summary[cell] = {"old_ms": round(statistics.median(o), 2), "new_ms": round(statistics.median(n), 2)}
        summary[cell] |= {
            "new_over_old": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
        print(f"{cell:>18}: {summary[cell]}", file=sys.stderr)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"old": args.old, "new": head, "rounds": args.rounds, "context": args.context, "cells": summary}))


def policy_at_zero(args) -> None:
    """A method held by its policy at 0 draft nodes against the baseline, at one batch size, their engines taking turns.

    What the adaptive row of ``make bench`` does where its tuned policy stops drafting: the EAGLE proposer is wrapped
    in a policy of 0 nodes at every batch size, so every step is plain decoding with the drafter's bookkeeping around
    it. Both engines run the bench's own rounds in turns (``bench.in_process.round_in_turns``: 16 workload prompts, 64
    tokens, greedy, the prompt cache warm after the first round, which is not counted); one tok/s ratio per round.
    """
    from speculab.bench import in_process
    from speculab.bench.settings import BenchConfig
    from speculab.bench.workload import interleave_domains, load_workload
    from speculab.methods import POLICY, parse_method, proposer_options
    from speculab.policy.table import SpeculationPolicy
    from speculab.testbed import testbed

    specs = [parse_method("baseline"), parse_method(args.method)]
    cfg = BenchConfig(methods=tuple(specs), max_tokens=64, repeats=args.rounds)
    target = in_process.load_target(cfg, interleave_domains(load_workload(None), 16))
    options = {s.label: proposer_options(s, target.loaded) for s in specs}
    options[specs[1].label] |= {POLICY: SpeculationPolicy.by_batch_size({1: 0})}
    in_process.round_in_turns(target, specs, options, args.batch_size, cfg, None)  # fills the prompt cache: not counted
    rates, ratios = [], []
    for r in range(args.rounds):
        repeats = in_process.round_in_turns(target, specs, options, args.batch_size, cfg, None)
        rates.append([rep.tok_s for rep in repeats])
        ratios.append(repeats[1].tok_s / repeats[0].tok_s)
        print(f"round {r + 1}: baseline {rates[-1][0]:.1f} tok/s, held at 0 {rates[-1][1]:.1f}: {ratios[-1]:.4f}x", flush=True)
    s = spread(ratios)
    print(f"held at 0 / baseline: median {s['median']:.4f}x [{s['min']:.4f}-{s['max']:.4f}]")
    print(json.dumps({"testbed": testbed(), "batch_size": args.batch_size, "method": args.method, "tok_s": rates, "ratios": ratios}))


def main() -> None:
    parser, sub = command_line(__doc__)
    p = subcommand(sub, "reruns", reruns)
    p.add_argument("a", help="run A's results.jsonl")
    p.add_argument("b", help="run B's results.jsonl")
    p.add_argument("--tolerance", type=float, default=0.10, help="the largest |B/A - 1| that counts as agreeing")
    p.add_argument("--batch-sizes", type=int, nargs="*", default=None, help="checked (default: the smallest and largest)")
    p = subcommand(sub, "commits", commits)
    p.add_argument("old", nargs="?", help="the older commit")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--context", type=int, default=CONTEXT, help="tokens of context a row (default: 1200)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p = subcommand(sub, "policy-at-zero", policy_at_zero)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--method", default=HELD)
    run_subcommand(parser)


if __name__ == "__main__":
    main()
