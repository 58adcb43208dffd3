"""``speculab tune``: choose a method's speculation policy (its draft budget per batch size, and per context length
with ``--contexts``) from measurements, check it, keep it.

``--engine speculab`` (the default) measures speculab's own engine and keeps the policy where ``--policy auto`` finds
it; ``--engine vllm`` measures the real vLLM that will serve (``on_vllm.py``) and writes its policy and vLLM's
``--speculative-config`` into a run folder. The last stdout line is one JSON document: the tune's record.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path

ENGINES = ("speculab", "vllm")


def add_tune_parser(sub) -> None:
    from speculab.runtime import add_model_flags
    from speculab.tune.run import BATCH_SIZES, CHECK_STEPS

    t = sub.add_parser(
        "tune", help="measure a method on this machine and choose its draft budget per batch size (and context: --contexts) (--policy auto)"
    )
    t.add_argument("--method", default="eagle", help="a speculative method as `speculab bench` names it (default: eagle)")
    t.add_argument(
        "--engine",
        choices=ENGINES,
        default="speculab",
        help="speculab: its own engine (the policy --policy auto reads); vllm: one real vLLM launch per draft length, "
        "then the chosen policy relaunched and checked (the environment `make vllm` makes)",
    )
    t.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    t.add_argument(
        "--contexts",
        nargs="+",
        default=None,
        metavar="CONTEXT",
        help="speculab: prompt lengths to measure at, as `speculab bench --contexts` takes them (workload 4k 8000 max; a "
        "context's own batch sizes after @, e.g. 4k@1,16), each request after whole repository files of its language; "
        "one policy keyed on batch size and context length, each context's budgets from the midpoint between its "
        "median prompt length and the next shorter one's (default: the workload's own, about 1.2k tokens)",
    )
    t.add_argument(
        "--num-prompts",
        type=int,
        default=None,
        help="workload prompts, the domains in turn (default: 12; vllm: the largest batch size)",
    )
    t.add_argument("--max-tokens", type=int, default=None, help="tokens each request decodes (default: 48; vllm: 64)")
    t.add_argument(
        "--check-steps", type=int, default=CHECK_STEPS, help="speculab: decode steps of the check run at each batch size (0: no check)"
    )
    t.add_argument("--repeats", type=int, default=5, help="vllm: timed passes of each cell, their median kept (default 5)")
    t.add_argument("--workload", default=None, help="JSONL as `speculab bench` takes it (default: the shipped prompts)")
    t.add_argument("--draft", default=None, help="vllm: the drafter folder (default: the method's shipped one)")
    t.add_argument("--engine-port", type=int, default=8300, help="vllm: the port it listens on (127.0.0.1)")
    t.add_argument("--engine-python", default=None, help="vllm: its Python (default: the environment `make vllm` made)")
    t.add_argument("--tp", type=int, default=1, help="vllm: tensor parallel ranks, as it will serve (default 1)")
    t.add_argument(
        "--out",
        type=Path,
        default=None,
        help="speculab: also write the policy file here; vllm: the run folder (results.jsonl, policy.json, report; default runs/tune-vllm-…)",
    )
    t.add_argument("--resume", action="store_true", help="vllm: continue the tune in --out, skipping the cells it measured")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    add_model_flags(t)
    t.set_defaults(func=cmd_tune, keep_caches=None)  # prompt caches kept only for a bench run (tune_with_defaults)


def check_args(args: argparse.Namespace) -> None:
    """Bad values and flags that do not apply to the engine are refused, naming the flag."""
    if min(args.batch_sizes) < 1 or (args.num_prompts or 1) < 1 or (args.max_tokens or 8) < 8 or args.check_steps < 0 or args.repeats < 1:
        raise ValueError("--batch-sizes, --num-prompts and --repeats must be >= 1, --max-tokens >= 8 and --check-steps >= 0")
    if args.contexts and args.engine != "speculab":
        raise ValueError(
            "--contexts applies to --engine speculab: vLLM keys speculation on batch size only, so a policy by context "
            "cannot be launched there (`speculab bench --engine vllm --contexts` measures vLLM at a context)"
        )
    if args.contexts:
        from speculab.tune.contexts import parse_contexts

        parse_contexts(args.contexts)  # a bad value is refused now, naming --contexts, before any model loads
    if args.engine == "speculab":
        for flag, value in (
            ("--draft", args.draft),
            ("--resume", args.resume),
            ("--engine-python", args.engine_python),
            ("--tp", args.tp != 1),
        ):
            if value:
                hint = "; speculab's engine takes the drafter in --method (eagle:eagle=PATH)" if flag == "--draft" else ""
                raise ValueError(f"{flag} applies to --engine vllm{hint}")
    elif args.resume and args.out is None:
        raise ValueError("--resume needs --out, the folder of the tune to continue")
    elif args.out is not None and args.out.is_file():
        raise ValueError(f"--out {args.out}: with --engine vllm, --out is a run folder, and that is a file")


def cmd_tune(args: argparse.Namespace) -> int:
    check_args(args)
    began = time.perf_counter()
    if args.engine == "vllm":
        record = _tune_vllm(args)
    else:
        from speculab.tune.report import print_report

        record = tune_speculab(args)
        print_report(record)
    record["seconds"] = round(time.perf_counter() - began, 1)
    print(json.dumps(record))
    return 0


def tune_speculab(args: argparse.Namespace) -> dict:
    """The in-process tune: its policy stored where ``--policy auto`` finds it; its record."""
    from speculab.tune.contexts import parse_contexts
    from speculab.tune.run import MAX_TOKENS, NUM_PROMPTS, tune

    args.num_prompts, args.max_tokens = args.num_prompts or NUM_PROMPTS, args.max_tokens or MAX_TOKENS
    args.contexts = parse_contexts(args.contexts)
    return tune(args)


def _tune_vllm(args: argparse.Namespace) -> dict:
    from speculab.bench.report import build_report
    from speculab.launch.cli import launch_spec
    from speculab.methods import POLICY, without_policy
    from speculab.tune.on_vllm import tune_vllm
    from speculab.tune.report import print_engine_report

    spec = launch_spec(args.method, args.draft, args.model is not None)
    if POLICY not in spec.params:
        raise ValueError(f"--method {spec.name}: nothing to tune, it drafts nothing")
    if spec.params[POLICY] not in (None, spec.method.defaults[POLICY]):
        raise ValueError("--method: tune chooses the policy; name the method without one")
    spec = without_policy(spec)
    out = args.out or Path("runs") / f"tune-vllm-{spec.name}-{datetime.now():%Y%m%d-%H%M%S}"
    record = tune_vllm(args, spec, out)
    record |= build_report(out / "results.jsonl", out)
    print_engine_report(record)
    return record
