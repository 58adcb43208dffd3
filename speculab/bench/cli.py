"""``speculab bench`` and ``speculab report``: argument parsing and the summary line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# eagle: the better of the two shipped heads on held-out prompts (BENCHMARKS.md, "The EAGLE-3 head"); eagle3 runs the other
# the fixed settings of each method, and the auto row: EAGLE, the drafter that holds up at larger batches, under
# the policy `speculab tune` chose for this machine (tuned before the cells when there is none: bench/auto_policy.py)
DEFAULT_METHODS = ("baseline", "draft", "eagle", "ngram", "suffix", "eagle:policy=auto")


def add_bench_parsers(sub, tuner=None) -> None:
    """``speculab bench`` and ``speculab report``; ``tuner`` (``tune.run.tune_with_defaults``, handed down by the
    top-level parser so that the benchmark does not import the tuner built on it) tunes an auto row (``policy=auto``) that has no
    policy on this machine."""
    from speculab.policy.table import add_policy_flag
    from speculab.runtime import add_model_flags
    from speculab.sampling import add_sampling_verify_flag

    b = sub.add_parser("bench", help="run the benchmark matrix (methods × batch sizes) and write the report")
    profile = b.add_mutually_exclusive_group()
    profile.add_argument(
        "--quick",
        dest="profile",
        action="store_const",
        const="quick",
        help="the default: batch 1 and 16, each with the workload's prompts (about 1.2k tokens) and with the same "
        "requests at 4,096 tokens of context; 32 output tokens, 3 repeats, prompt cache on, no acceptance pass; each "
        "cell runs as many of 16 prompts (whole batches, one of each language at least) as fit its share of a "
        "2-minute time limit, sized by a calibration here",
    )
    profile.add_argument(
        "--full",
        dest="profile",
        action="store_const",
        const="full",
        help="the whole workload: 124 prompts (the study's 100 and the agentic 24), 600 output tokens, 3 repeats (for GPU machines)",
    )
    b.set_defaults(profile=None)  # None: --quick, or on --resume the run's own
    b.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="name[:key=value,...], e.g. eagle:num_steps=5,topk=8,num_draft_tokens=32 draft:num_speculative_tokens=4 "
        f"(default: {' '.join(DEFAULT_METHODS)}; none when --endpoint is given)",
    )
    _add_server_flags(b)
    add_policy_flag(b)
    b.add_argument("--batch-sizes", type=int, nargs="+", default=None, help="default: 1 16 (--quick), 1 2 4 8 16 (--full)")
    _add_context_flags(b)
    b.add_argument("--num-prompts", type=int, default=None, help="default: the profile's")
    b.add_argument("--max-tokens", type=int, default=None, help="default: the profile's")
    b.add_argument("--repeats", type=int, default=None, help="default: the profile's")
    b.add_argument("--temperature", type=float, default=None, help="default: 0 (greedy)")
    b.add_argument("--seed", type=int, default=None, help="prompt i is sampled with seed SEED + i (default: 0)")
    add_sampling_verify_flag(b, default=None)
    b.add_argument(
        "--workload",
        default=None,
        help="JSONL with id/domain/task/messages, a plain prompt or an agent's session (one item a turn); `sessions`: the "
        "shipped multi-turn agent sessions (default: the shipped workload, 100 coding prompts and 24 agentic conversations)",
    )
    b.add_argument("--out", type=Path, default=Path("runs/bench"), help="output folder (results.jsonl, report.md, report.html, plots)")
    b.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out with its recorded settings, skipping finished cells (a flag that contradicts them is refused)",
    )
    b.add_argument(
        "--prompt-cache",
        dest="prompt_cache",
        action="store_true",
        default=None,
        help="reuse each prompt's prefill across cells (default on in --quick)",
    )
    b.add_argument("--no-prompt-cache", dest="prompt_cache", action="store_false")
    add_model_flags(b, device=False)  # the benchmark runs where speculab runs by default
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(func=cmd_bench, tuner=tuner)

    r = sub.add_parser("report", help="rebuild report.md/report.html from a results.jsonl")
    r.add_argument("results", type=Path)
    r.add_argument("--out", type=Path, default=None, help="default: the results file's folder")
    r.set_defaults(func=cmd_report)


def _add_context_flags(b) -> None:
    """The context axis and the acceptance pass."""
    b.add_argument(
        "--contexts",
        nargs="+",
        default=None,
        metavar="CONTEXT",
        help="prompt lengths in target tokens, the matrix's third axis: each request after whole repository files of "
        "its language up to that many tokens, as coding agents send them (e.g. workload 4k 8000 max; workload: the "
        "prompts as they are, about 1.2k; max: the most the target's positions hold; a context's own batch sizes "
        "after @, e.g. 4k@1,4,16; default: the profile's)",
    )
    b.add_argument(
        "--acceptance-pass",
        dest="acceptance_pass",
        action="store_true",
        default=None,
        help="after the cells, each method's acceptance by language on 12 prompts a language, untimed (default on in --full)",
    )
    b.add_argument("--no-acceptance-pass", dest="acceptance_pass", action="store_false")


def _add_server_flags(b) -> None:
    """Where methods run besides in-process: OpenAI-compatible endpoints, and engines launched per method."""
    b.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="URL",
        help="an OpenAI-compatible server to measure with the same workload (repeatable; e.g. "
        "http://127.0.0.1:8000); B streaming requests in flight for batch size B",
    )
    b.add_argument(
        "--baseline-endpoint",
        default=None,
        metavar="URL",
        help="a server decoding plainly: the baseline its engine's other endpoints are compared with",
    )
    b.add_argument("--label", action="append", default=[], help="a name for each --endpoint, in order (default: engine:method@host)")
    b.add_argument("--api-key", default=None, help="Bearer key for the endpoints")
    b.add_argument("--served-model", default=None, help="the model name to request (default: the first in /v1/models)")
    b.add_argument("--request-timeout", type=float, default=600.0, help="seconds one HTTP request may take")
    b.add_argument(
        "--engine",
        dest="engines",
        nargs="+",
        default=None,
        choices=["speculab", "vllm", "sglang"],
        help="where --methods run: speculab in-process (the default) and/or vLLM or SGLang, launched once per "
        "method (speculab launch) and measured over HTTP; e.g. --engine speculab vllm",
    )
    b.add_argument(
        "--engine-python", default=None, help="the launched engine's Python (default for vLLM: the environment `make vllm` made)"
    )
    b.add_argument("--engine-port", type=int, default=8300, help="the port a launched engine listens on (127.0.0.1)")
    b.add_argument("--tp", type=int, default=None, help="tensor parallel ranks of each launched engine (default 1)")


def config_from_args(args: argparse.Namespace, resumed=None):
    """The run's settings from the command line; a flag not given takes the ``resumed`` run's value (``--resume``),
    else its default."""
    from speculab.bench.contexts import context_key, parse_context_spec, profile_contexts
    from speculab.bench.settings import PROFILES, BenchConfig

    def given(flag_value, field: str, default):
        return flag_value if flag_value is not None else getattr(resumed, field) if resumed is not None else default

    custom = any(
        getattr(args, k) is not None for k in ("num_prompts", "max_tokens", "repeats", "prompt_cache", "contexts", "acceptance_pass")
    )
    name = args.profile or (resumed.profile.split("+")[0] if resumed is not None else "quick")
    profile = PROFILES[name]
    batch_sizes = tuple(given(args.batch_sizes, "batch_sizes", profile["batch_sizes"]))
    if any(b < 1 for b in batch_sizes):
        raise ValueError("--batch-sizes must be positive")
    specs = [parse_context_spec(v) for v in args.contexts] if args.contexts else None
    contexts = tuple(dict.fromkeys(c for c, _ in specs)) if specs else given(None, "contexts", None)
    own_sizes = {context_key(c): b for c, b in specs if b} if specs else None
    context_batch_sizes = given(own_sizes, "context_batch_sizes", profile["context_batch_sizes"])
    chosen = {
        "num_prompts": given(args.num_prompts, "num_prompts", profile["num_prompts"]),
        "max_tokens": given(args.max_tokens, "max_tokens", profile["max_tokens"]),
        "repeats": given(args.repeats, "repeats", profile["repeats"]),
        "prompt_cache": given(args.prompt_cache, "prompt_cache", profile["prompt_cache"]),
        # --num-prompts asks for that many prompts in every cell; otherwise the profile's time limit sizes them
        "time_limit_s": None if args.num_prompts is not None else given(None, "time_limit_s", profile["time_limit_s"]),
    }
    endpoints = _endpoints(args) if args.endpoint or args.baseline_endpoint or resumed is None else resumed.endpoints
    engines = tuple(dict.fromkeys(given(args.engines, "engines", ("speculab",))))
    if contexts is None:  # the profile's, as this run can measure them
        # an endpoint's limit is its own; a launched engine is given the room the profile's contexts need
        contexts = profile_contexts(profile["contexts"], args.model, chosen["max_tokens"], bool(endpoints))
    methods = _methods(args, resumed, endpoints)
    if args.tp is not None and (args.tp < 1 or args.tp > 1 and set(given(args.engines, "engines", ("speculab",))) <= {"speculab"}):
        raise ValueError("--tp: the tensor parallel ranks of a launched engine (--engine vllm), at least 1")
    if not methods and not endpoints:
        raise ValueError("nothing to measure: give --methods or --endpoint")
    return BenchConfig(
        methods=methods,
        batch_sizes=batch_sizes,
        contexts=contexts,
        context_batch_sizes=context_batch_sizes,
        acceptance_pass=given(args.acceptance_pass, "acceptance_pass", profile["acceptance_pass"]),
        temperature=given(args.temperature, "temperature", 0.0),
        seed=given(args.seed, "seed", 0),
        sampling_verify=given(args.sampling_verify, "sampling_verify", "auto"),
        workload=given(args.workload, "workload", None),
        profile=resumed.profile if resumed is not None and args.profile in (None, name) else name + ("+custom" if custom else ""),
        dtype=given(args.dtype, "dtype", None),
        kv_dtype=given(args.kv_dtype, "kv_dtype", None),
        model=given(args.model, "model", None),
        endpoints=endpoints,
        request_timeout=args.request_timeout,
        engines=engines,
        engine_python=args.engine_python,
        engine_port=args.engine_port,
        tp=given(args.tp, "tp", 1),
        **chosen,
    )


def _methods(args: argparse.Namespace, resumed, endpoints: tuple) -> tuple:
    """``--methods`` (default: DEFAULT_METHODS, or none when endpoints are measured) under ``--policy``."""
    from speculab.methods import parse_method, with_policy

    if args.methods is None and resumed is not None:
        found = resumed.methods
    else:
        names = args.methods if args.methods is not None else [] if endpoints else DEFAULT_METHODS
        found = tuple(parse_method(m) for m in names)
    methods = tuple(with_policy(m, args.policy) for m in found)
    if args.methods is None and resumed is None:  # --policy on the defaults makes eagle the auto row: once
        methods = tuple({m.label: m for m in methods}.values())
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--methods repeats a method with the same parameters: {labels}")
    return methods


def _endpoints(args: argparse.Namespace) -> tuple:
    from speculab.bench.over_http.endpoint import Endpoint

    if len(args.label) > len(args.endpoint):
        raise ValueError(f"{len(args.label)} --label for {len(args.endpoint)} --endpoint")
    for url in [*args.endpoint, *([args.baseline_endpoint] if args.baseline_endpoint else [])]:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--endpoint {url}: give a URL such as http://127.0.0.1:8000")
    labels = args.label + [None] * (len(args.endpoint) - len(args.label))
    found = [Endpoint(url, label, args.api_key, args.served_model) for url, label in zip(args.endpoint, labels)]
    if args.baseline_endpoint:
        found.insert(0, Endpoint(args.baseline_endpoint, None, args.api_key, args.served_model, baseline=True))
    return tuple(found)


def cmd_bench(args: argparse.Namespace) -> int:
    from speculab.bench.auto_policy import RunTuner
    from speculab.bench.report import build_report, summary
    from speculab.bench.resume import recorded_config, refuse_contradictions
    from speculab.bench.runner import run_bench
    from speculab.bench.workload import load_workload

    recorded = recorded_config(args.out, args.api_key) if args.resume else None
    cfg = config_from_args(args, recorded)
    if recorded is not None:
        refuse_contradictions(cfg, recorded, args.out)
    load_workload(cfg.workload)  # a bad workload fails before any model loads
    # an auto row's tune measures the run's contexts (bench/auto_policy.py)
    tuner = RunTuner.for_run(args.tuner, cfg)
    results = run_bench(cfg, args.out, resume=args.resume, progress=not args.no_progress, tuner=tuner)
    paths = build_report(results, args.out)
    print(json.dumps({"results": str(results), **paths, **summary(results)}))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from speculab.bench.report import build_report, summary

    if not args.results.is_file():
        raise ValueError(f"{args.results}: no such results file")
    paths = build_report(args.results, args.out or args.results.parent)
    print(json.dumps({"results": str(args.results), **paths, **summary(args.results)}))
    return 0
