"""``speculab serve``: the engine behind an OpenAI-compatible HTTP server (uvicorn).

Knows: the command's flags (vLLM's names where vLLM has one: ``--served-model-name``,
``--max-model-len``, ``--api-key``), loading the model and the method's drafter
(``speculab.methods``, the same specs as ``generate`` and ``bench``), and that the
server binds 127.0.0.1 unless told otherwise. Does not know: the routes (``app.py``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading

DEFAULT_PREFIX_CACHE_GIB = 2.0  # the prompt cache's cap: about ten 4k-token prompts of the embedded model in fp32


def add_serve_parser(sub) -> None:
    from speculab.policy.table import add_policy_flag
    from speculab.runtime import add_model_flags
    from speculab.sampling import add_sampling_verify_flag

    s = sub.add_parser("serve", help="serve the engine over OpenAI-compatible HTTP (vLLM's metric names)")
    add_model_flags(s)
    add_policy_flag(s)
    s.add_argument(
        "--method", default="baseline", help="name[:key=value,...] as in `speculab bench`, e.g. eagle or ngram:num_speculative_tokens=3"
    )
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--max-batch", type=int, default=16, help="requests decoded together (engine slots)")
    s.add_argument("--max-queue", type=int, default=64, help="requests that may wait for a slot; more are answered 429")
    s.add_argument("--max-model-len", type=int, default=4096, help="context per request: prompt + output tokens")
    s.add_argument(
        "--prefills-per-step",
        type=int,
        default=0,
        help="with --max-num-batched-tokens 0, whole prompts admitted per engine step; 0 (the default, as `speculab "
        "bench`): every waiting one that fits, the most throughput; 1: running requests wait for one prefill, not all",
    )
    s.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="tokens an engine step runs (vLLM's name): the running requests' verify tokens first, a waiting prompt's "
        "prefill chunk in the rest (at least a quarter); smaller: steadier streams, later first tokens. Default: each "
        "chunk sized to cost about 0.6 of a decode step, measured as the server runs (the streams' gaps "
        "within about twice their own); 0: each prompt's whole prefill in the step that admits it, "
        "--prefills-per-step at a time",
    )
    s.add_argument(
        "--prefix-cache-gib",
        type=float,
        default=DEFAULT_PREFIX_CACHE_GIB,
        help="memory for prompts kept after their prefill: a request that resends one (an agent's next turn resends "
        "the conversation so far) takes the longest cached head's KV and prefills only the rest; the least recently "
        f"used leave past the cap (default {DEFAULT_PREFIX_CACHE_GIB:g} GiB; 0: none kept)",
    )
    s.add_argument(
        "--api-key",
        default=os.environ.get("SPECULAB_API_KEY"),
        help="require 'Authorization: Bearer KEY' on /v1 (default: $SPECULAB_API_KEY, else no key)",
    )
    s.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest request body accepted; a larger one is answered 413 (default: 4 MiB)",
    )
    add_sampling_verify_flag(s)
    s.add_argument("--served-model-name", default=None, help="the model name clients send (default: the model folder's name)")
    s.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=cmd_serve)


def build_server(args: argparse.Namespace):
    """The FastAPI app for these arguments, its model and drafter loaded; (app, info, worker)."""
    import speculab
    from speculab import runtime
    from speculab.chunked_prefill import PacedChunks, TokenBudget
    from speculab.engine import Engine, engine_bytes
    from speculab.free_memory import GIB, require
    from speculab.methods import new_proposer, parse_method, proposer_options, require_own_drafter, with_policy
    from speculab.prompt_cache import PromptCache
    from speculab.redact import redact_argv
    from speculab.serve.app import build_app
    from speculab.serve.limits import DEFAULT_MAX_BODY_BYTES
    from speculab.serve.metrics import ServerMetrics
    from speculab.serve.state import ServeInfo, ServeState
    from speculab.serve.worker import EngineWorker

    max_body = args.max_body_bytes if args.max_body_bytes is not None else DEFAULT_MAX_BODY_BYTES
    budget = args.max_num_batched_tokens  # None: chunks paced to the decode
    if (
        min(args.max_batch, max_body) < 1
        or min(args.max_queue, args.prefills_per_step, budget or 0, args.prefix_cache_gib) < 0
        or args.max_model_len < 2
    ):
        raise ValueError(
            "--max-batch and --max-body-bytes must be >= 1, --max-queue, --prefills-per-step, --max-num-batched-tokens "
            "and --prefix-cache-gib >= 0, and --max-model-len >= 2"
        )
    spec = with_policy(parse_method(args.method), args.policy)
    if args.model is not None:
        require_own_drafter(spec, "{key}=PATH")
    loaded = runtime.load(args.model, args.dtype, args.device, args.kv_dtype)
    proposer = new_proposer(spec, proposer_options(spec, loaded))
    cap = int(args.prefix_cache_gib * GIB)
    needed = engine_bytes(loaded.model, args.max_batch, args.max_model_len, proposer) + cap
    what = f"--max-batch {args.max_batch} x --max-model-len {args.max_model_len} ({spec.name})" + (
        f" + --prefix-cache-gib {args.prefix_cache_gib:g}" if cap else ""
    )
    require(needed, what, loaded.model.norm.weight.device)
    engine = Engine(
        loaded.model,
        args.max_batch,
        args.max_model_len,
        loaded.tokenizer.stop_ids,
        proposer,
        PromptCache(cap) if cap else None,
        prefills_per_step=args.prefills_per_step or None,
        chunked_prefill=PacedChunks() if budget is None else TokenBudget(budget) if budget else None,
    )
    name = args.served_model_name or loaded.path.name
    metrics = ServerMetrics(name)
    info = ServeInfo(
        model_name=name,
        model_path=str(loaded.path),
        method=spec.name,
        label=spec.label,
        dtype=loaded.dtype,
        kv_dtype=loaded.kv_dtype,
        sampling_verify=args.sampling_verify,
        max_model_len=engine.max_seq_len,
        version=speculab.__version__,
        command=shlex.join(["speculab", *redact_argv(getattr(args, "argv", []))]),
    )
    worker = EngineWorker(engine, metrics, args.max_queue)
    state = ServeState(worker, loaded.tokenizer, metrics, info, api_key=args.api_key)
    app = build_app(state, engine_thread=False, max_body_bytes=max_body)
    return app, info, worker


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    app, info, worker = build_server(args)
    # HTTP in a thread of its own; the engine in this (main) thread, where torch's OpenMP team already lives
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5))
    http = threading.Thread(target=server.run, name="speculab-http", daemon=True)
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    http.start()
    print(
        f"speculab serve: {info.model_name} ({info.label}, {info.dtype}) on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True
    )
    try:
        worker.run(should_stop=lambda: server.should_exit or not http.is_alive())
    except KeyboardInterrupt:
        pass
    finally:
        server.should_exit = True
        http.join(timeout=15)
    return 0 if server.started else 1
