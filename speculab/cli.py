"""The ``speculab`` command line.

``speculab generate``: decode a prompt, streaming text to stdout; with
``--json`` the last stdout line is one JSON object.
``speculab compare transformers|llama.cpp``: the peer benchmarks; their last
stdout line is one JSON object.
``speculab fetch``: fetch and convert the embedded default model.
``speculab bench`` / ``speculab report``: the benchmark matrix and its report (``speculab.bench``).
``speculab serve``: the engine behind an OpenAI-compatible HTTP server (``speculab.serve``).
``speculab launch vllm|sglang`` / ``speculab export``: real engines with speculab's methods (``speculab.launch``).
``speculab train eagle|draft``: train a drafter for a target (``speculab.train``).
``speculab plan``: memory and KV capacity per rank of a serving setup, from config.json files (``speculab.models.memory_plan``).
``speculab tune``: a method's costs measured here and its draft budget per batch size, for ``--policy auto`` (``speculab.tune``).

Each command's modules are imported inside the function that runs it (here and in each package's ``cli.py``,
the only such imports in speculab): one command does not pay at start-up for the others' stacks (the server's
FastAPI and uvicorn, the trainer, the launched engines' commands, matplotlib).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import time

from speculab.runtime import add_model_flags

# generate's flags that set a method parameter (vLLM's and SGLang's names); each overrides the spec's value
METHOD_FLAGS = (
    "draft",
    "eagle",
    "num_steps",
    "topk",
    "num_draft_tokens",
    "draft_vocab",
    "num_speculative_tokens",
    "prompt_lookup_min",
    "prompt_lookup_max",
)


def method_spec(args: argparse.Namespace):
    """The spec named by --method (``name[:key=value,...]``, as in ``speculab bench``) with the flags given."""
    from speculab.methods import method, parse_method, require_own_drafter, with_policy

    name, _, settings = args.method.partition(":")
    defaults = method(name).defaults
    given = {k: getattr(args, k) for k in METHOD_FLAGS if getattr(args, k) is not None}
    for key in given:
        if key not in defaults:
            raise ValueError(f"--{key.replace('_', '-')} does not apply to --method {name}")
    spec = with_policy(
        parse_method(":".join([name, ",".join(filter(None, [settings, *(f"{k}={v}" for k, v in given.items())]))])), args.policy
    )
    if args.model is not None:
        require_own_drafter(spec, "--{key} PATH")
    return spec


def _run_once(loaded, prompt_ids, params, proposer, on_token=None):
    from speculab.engine import Engine, sequence_length

    engine = Engine(
        loaded.model,
        max_batch=1,
        max_seq_len=sequence_length(len(prompt_ids), params.max_tokens, proposer),
        stop_ids=loaded.tokenizer.stop_ids,
        proposer=proposer,
    )
    start = time.perf_counter()
    (request,) = engine.generate([prompt_ids], params, on_token=on_token)
    return request, time.perf_counter() - start


def _decode_rate(request) -> float | None:
    n = len(request.output_ids)
    span = request.token_times[-1] - request.token_times[0] if n > 1 else 0.0
    return (n - 1) / span if span > 0 else None


def cmd_generate(args: argparse.Namespace) -> int:
    from speculab.bench.agreement import prefix_agreement
    from speculab.methods import new_proposer, proposer_options
    from speculab.runtime import load
    from speculab.sampling import SamplingParams

    loaded = load(args.model, args.dtype, args.device, args.kv_dtype)
    tok = loaded.tokenizer
    prompt_ids = tok.encode_chat([{"role": "user", "content": args.prompt}]) if args.chat else tok.encode(args.prompt)
    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        ignore_eos=args.ignore_eos,
        sampling_verify=args.sampling_verify,
    )
    spec = method_spec(args)
    options = proposer_options(spec, loaded)
    if args.compare_baseline:  # both sides warmed up, so neither pays first-call costs in its timing
        for warm in (None, new_proposer(spec, options)):
            _run_once(loaded, prompt_ids, dataclasses.replace(params, max_tokens=min(8, params.max_tokens)), warm)
    baseline = _run_once(loaded, prompt_ids, params, None)[0] if args.compare_baseline else None
    request, total = _run_once(
        loaded, prompt_ids, params, new_proposer(spec, options), None if args.json else _printer(tok.stream_decoder())
    )
    if not args.json:
        print(flush=True)
        return 0
    stats = request.stats
    result = {
        "text": tok.decode(request.output_ids),
        "num_tokens": len(request.output_ids),
        "prompt_tokens": len(prompt_ids),
        "tokens_per_s": _decode_rate(request),
        "ttft_s": request.ttft,
        "total_s": total,
        "finish_reason": request.finish_reason,
        "seed": request.noise.seed if request.noise is not None else args.seed,  # a coupled request's, drawn if none was given
        "method": spec.name,
        "label": spec.label,
        "mean_acceptance_length": stats.mean_acceptance_length,
        "acceptance_rate": stats.acceptance_rate,
        "spec_stats": stats.as_dict(),
        "dtype": loaded.dtype,
        "kv_dtype": loaded.kv_dtype,
        "device": loaded.device,
        "model": str(loaded.path),
    }
    if baseline is not None:
        base_rate = _decode_rate(baseline)
        result |= {
            "identical": baseline.output_ids == request.output_ids,
            "agreement": prefix_agreement([request.output_ids], [baseline.output_ids]),
            "baseline_tokens_per_s": base_rate,
            "speedup": result["tokens_per_s"] / base_rate if base_rate and result["tokens_per_s"] else None,
        }
    print(json.dumps(result))
    return 0


def _printer(decode):
    def on_token(event) -> None:
        for token in event.token_ids:
            piece = decode(token)
            if piece:
                sys.stdout.write(piece)
        sys.stdout.flush()

    return on_token


def cmd_compare(args: argparse.Namespace) -> int:
    from speculab.compare import peers

    runner = {
        "transformers": peers.compare_transformers,
        "llama.cpp": peers.compare_llamacpp,
        "eagle-reference": peers.compare_eagle_reference,
    }[args.peer]
    if args.method is not None and args.peer != "llama.cpp":
        raise ValueError("--method compares speculation with llama.cpp only: `speculab compare llama.cpp --method draft|ngram`")
    result = runner(args)
    print(json.dumps(result))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from speculab.models.embedded import ensure_embedded_model

    print(ensure_embedded_model())
    return 0


def _add_generate_parser(sub) -> None:
    from speculab.policy.table import add_policy_flag  # with sampling's flag, what the parser needs beyond runtime
    from speculab.sampling import add_sampling_verify_flag

    g = sub.add_parser("generate", help="decode one prompt")
    g.add_argument("--prompt", required=True)
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--ignore-eos", action="store_true", help="do not stop at the model's stop tokens")
    add_sampling_verify_flag(g)
    g.add_argument("--json", action="store_true", help="print one JSON object as the last stdout line")
    g.add_argument(
        "--method",
        default="baseline",
        help="baseline, ngram, draft, eagle or eagle3, with optional settings as in `speculab bench`: "
        "eagle:num_steps=5,topk=8,num_draft_tokens=32; defaults in speculab/methods.py",
    )
    g.add_argument("--draft", default=None, help="draft model checkpoint folder (--method draft; default: the shipped one)")
    g.add_argument("--eagle", default=None, help="EAGLE head folder (--method eagle or eagle3; default: the shipped one)")
    g.add_argument("--num-steps", type=int, default=None, help="EAGLE tree depth")
    g.add_argument("--topk", type=int, default=None, help="EAGLE branching per expanded node")
    g.add_argument("--num-draft-tokens", type=int, default=None, help="EAGLE tree size, root included")
    g.add_argument(
        "--draft-vocab",
        default=None,
        help="--method eagle or draft: draft over the N most frequent tokens only (the drafter folder's "
        "draft_vocab.safetensors), auto, or none (the whole vocabulary)",
    )
    g.add_argument("--num-speculative-tokens", type=int, default=None, help="draft/ngram chain length")
    g.add_argument("--prompt-lookup-min", type=int, default=None)
    g.add_argument("--prompt-lookup-max", type=int, default=None)
    g.add_argument("--compare-baseline", action="store_true", help="also run plain decoding; report identical, agreement, speedup")
    add_policy_flag(g)
    add_model_flags(g)
    g.set_defaults(func=cmd_generate)


def _add_compare_parser(sub) -> None:
    c = sub.add_parser("compare", help="benchmark speculab's baseline against a peer on the same model and prompt")
    c.add_argument("peer", choices=["transformers", "llama.cpp", "eagle-reference"])
    c.add_argument("--batch-size", type=int, default=1)
    c.add_argument("--max-tokens", type=int, default=128)
    c.add_argument("--prompt-tokens", type=int, default=1200)
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--threads", type=int, default=None, help="torch/llama.cpp threads (default: torch's choice)")
    c.add_argument("--quant", choices=["bf16", "f32", "q4_1"], default="bf16", help="llama.cpp only: GGUF type")
    c.add_argument(
        "--method",
        default=None,
        help="llama.cpp only: compare speculation, draft or ngram (a method spec: ngram:num_speculative_tokens=5), "
        "both engines plain and speculating, side by side on the workload's prompts",
    )
    c.add_argument("--draft", default=None, help="with --method draft: the draft model folder (default: the shipped one)")
    c.add_argument("--prompts", type=int, default=8, help="with --method: workload prompts, the domains in turn")
    c.add_argument("--workload", default=None, help="with --method: a workload JSONL (default: the shipped one)")
    c.add_argument(
        "--ngram-size", type=int, default=4, help="with --method ngram: llama.cpp's lookup n-gram size (4: its best of 2-4 here)"
    )
    c.add_argument("--port", type=int, default=8090, help="with --method: llama-server's ports, this and the next")
    c.add_argument("--eagle", default=None, help="eagle-reference only: the EAGLE-1 head folder")
    c.add_argument("--tree", default="mc_sim_7b_63", help="eagle-reference only: the static tree both sides use")
    c.add_argument("--num-steps", type=int, default=5, help="eagle-reference only: speculab's dynamic tree depth")
    c.add_argument("--topk", type=int, default=4)
    c.add_argument("--num-draft-tokens", type=int, default=16)
    c.add_argument("--reference-python", default=None, help="python of the reference environment")
    c.add_argument("--reference-path", default=None, help="a local clone of the current reference code (EAGLE-2) to use instead")
    add_model_flags(c)
    c.set_defaults(func=cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speculab", description="Speculative decoding, measured.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate_parser(sub)
    _add_compare_parser(sub)

    from speculab.bench.cli import add_bench_parsers
    from speculab.launch.cli import add_launch_parsers
    from speculab.models.memory_plan import add_plan_parser
    from speculab.serve.cli import add_serve_parser
    from speculab.train.cli import add_train_parser
    from speculab.tune.cli import add_tune_parser
    from speculab.tune.run import tune_with_defaults

    add_bench_parsers(sub, tuner=tune_with_defaults)  # the benchmark's auto rows tune with it (bench/auto_policy.py)
    add_serve_parser(sub)
    add_launch_parsers(sub)
    add_train_parser(sub)
    add_plan_parser(sub)
    add_tune_parser(sub)

    f = sub.add_parser("fetch", help="fetch and convert the embedded default model into the cache")
    f.set_defaults(func=cmd_fetch)
    return parser


def _stop_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded by commands that write manifests
    # a plain `kill` unwinds like Ctrl-C: the servers a command launched (bench and tune --engine vllm) are stopped
    # by their context managers instead of being left running
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if main_thread else None
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, RuntimeError) as err:
        print(f"speculab: error: {err}", file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
