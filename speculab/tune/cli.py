"""``speculab tune``: measure a method's costs here, choose its draft cap per batch size, check it, keep it.

The last stdout line is one JSON document: the cost model, the policy, the check and the testbed (also written to
the store's ``.costs.json``, beside the ``.policy.json`` that ``--policy auto`` reads).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def add_tune_parser(sub) -> None:
    from speculab.runtime import add_model_flags

    t = sub.add_parser("tune", help="measure a method's costs on this machine and choose its draft cap per batch size (--policy auto)")
    t.add_argument("--method", default="eagle", help="a speculative method as `speculab bench` names it (default: eagle)")
    t.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    t.add_argument("--num-prompts", type=int, default=12, help="workload prompts, the domains in turn (default 12)")
    t.add_argument("--max-tokens", type=int, default=48, help="tokens each request decodes (default 48)")
    t.add_argument("--check-steps", type=int, default=24, help="decode steps of the check run at each batch size (0: no check)")
    t.add_argument("--workload", default=None, help="JSONL as `speculab bench` takes it (default: the shipped prompts)")
    t.add_argument("--out", type=Path, default=None, help="also write the policy file here")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    add_model_flags(t)
    t.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from speculab.tune.report import print_report
    from speculab.tune.run import tune

    if min(args.batch_sizes) < 1 or args.num_prompts < 1 or args.max_tokens < 8 or args.check_steps < 0:
        raise ValueError("--batch-sizes and --num-prompts must be >= 1, --max-tokens >= 8 and --check-steps >= 0")
    began = time.perf_counter()
    record = tune(args)
    record["seconds"] = round(time.perf_counter() - began, 1)
    print_report(record)
    print(json.dumps(record))
    return 0
