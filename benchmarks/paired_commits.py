"""Before and after a change to the kernels, on a machine whose speed drifts: an older commit against this checkout.

Knows: how to build another commit's native kernels (a git worktree of it, `python -m speculab.native` with that
tree first on the path) and how to set two builds side by side: child processes that alternate, old, new, new, old,
..., each measuring every cell, and the ratio taken pair by pair (on this project's virtual machines the speed moves
by 10-25% within minutes, so two separate runs cannot be compared). Two builds cannot share one process: the
second library's calls bind to the first one's symbols.
Cells: a target forward over q new tokens per row after 1,200 tokens of context (``batch_verify_cost.measure_runs``,
median of 5), and the attention alone over the model's 30 layers' caches, for (batch, q) in CELLS.
Does not know: what changed between the commits.
Usage: python benchmarks/paired_commits.py OLD_COMMIT [--rounds 4]. The last stdout line is one JSON document.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CELLS = [(1, 1), (1, 4), (1, 8), (1, 16), (16, 1), (16, 4)]


def measure_cells() -> dict[str, float]:
    """In a child: ms of every cell with the speculab found first on the path."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from batch_verify_cost import measure_runs
    from forward_floor import attention_ms

    from speculab.runtime import load

    model = load(None, "float32").model
    cells = {}
    for b in sorted({b for b, _ in CELLS}):
        runs = measure_runs(model, b, [q for bb, q in CELLS if bb == b], 5)
        cells |= {f"forward b{b} q{q}": statistics.median(t) for q, t in runs.items()}
    cells |= {f"attention b{b} q{q}": attention_ms(model, b, q, 5) for b, q in CELLS}
    return cells


def child(tree: Path) -> dict[str, float]:
    env = os.environ | {"PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--child"], cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the cells failed with {tree} first on the path:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old", nargs="?")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_cells()))
        return
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder) / "old"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(old), args.old], check=True, capture_output=True)
        try:
            for tree in (old, REPO):  # build both first, so no build runs beside a measurement
                subprocess.run(  # not from the checkout's folder: `-m` puts the working directory first on the path
                    [sys.executable, "-m", "speculab.native"],
                    cwd=tempfile.gettempdir(),
                    env=os.environ | {"PYTHONPATH": str(tree)},
                    check=True,
                )
            runs = {"old": [], "new": []}
            for i in range(args.rounds):
                for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                    runs[name].append(child(old if name == "old" else REPO))
                    print(f"round {i + 1}: {name} done", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False)
    summary = {}
    for cell in runs["old"][0]:
        o, n = [r[cell] for r in runs["old"]], [r[cell] for r in runs["new"]]
        ratios = [b / a for a, b in zip(o, n)]
        summary[cell] = {
            "old_ms": round(statistics.median(o), 2),
            "new_ms": round(statistics.median(n), 2),
            "new_over_old": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
        print(f"{cell:>18}: {summary[cell]}", file=sys.stderr)
    print(
        json.dumps(
            {
                "old": args.old,
                "new": subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
                "rounds": args.rounds,
                "cells": summary,
            }
        )
    )


if __name__ == "__main__":
    main()
