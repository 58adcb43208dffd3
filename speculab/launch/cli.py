"""``speculab launch`` and ``speculab export``: argument parsing and what they print.

``speculab launch {vllm,sglang} --method M …`` prints the command with a reason per flag, then
(without ``--print``) runs it until Ctrl-C; ``speculab export --for ENGINE DRAFTER OUT`` writes a
drafter in the engine's layout. The last stdout line of each is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from datetime import datetime
from pathlib import Path

from speculab.runtime import add_model_flags


def add_launch_parsers(sub) -> None:
    from speculab.launch.prepare import ENGINES

    p = sub.add_parser("launch", help="start vLLM or SGLang with a speculative method; --print shows the command only")
    p.add_argument("engine", choices=list(ENGINES))
    p.add_argument(
        "--method",
        default="baseline",
        help="baseline, ngram, suffix, draft, eagle or eagle3, with settings as in `speculab bench` (eagle:num_steps=3)",
    )
    add_model_flags(p, device=False, dtype=False)  # --dtype below is the launched engine's
    p.add_argument("--draft", default=None, help="the drafter folder (a draft model or an EAGLE head; default: the shipped one)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    p.add_argument(
        "--engine-version",
        default=None,
        help="the engine version to write the command for (default: the installed one, else the newest known)",
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="positions a request may hold, prompt and output (default on vLLM-CPU: 2048; agents' contexts need more)",
    )
    p.add_argument(
        "--kv-cache-gib", type=int, default=None, help="vLLM-CPU's KV cache in GiB (default 1: 23k tokens of SmolLM2-135M in fp32)"
    )
    p.add_argument("--python", default=None, help="the Python of the engine's environment (default for vLLM: `make vllm`'s)")
    p.add_argument("--dtype", default=None, help="default: speculab's dtype on this CPU for the local vLLM, else the engine's")
    p.add_argument("--out", type=Path, default=None, help="run folder: the exported drafter and server.log (default: runs/launch-…)")
    p.add_argument("--print", dest="print_only", action="store_true", help="print the command and why each flag; start nothing")
    p.add_argument("--startup-timeout", type=float, default=600.0, help="seconds to wait for /health")
    p.set_defaults(func=cmd_launch)

    e = sub.add_parser("export", help="write a drafter (EAGLE head or draft model) in vLLM's or SGLang's layout")
    e.add_argument("--for", dest="engine", required=True, choices=list(ENGINES))
    e.add_argument("drafter", type=Path)
    e.add_argument("out", type=Path)
    e.add_argument(
        "--draft-vocab",
        default="auto",
        help="SGLang EAGLE heads: keep the N most frequent tokens as --speculative-token-map (auto, none or N)",
    )
    e.add_argument(
        "--format",
        choices=("engine", "speculators"),
        default="engine",
        help="engine: the engine's own layout (launched with --speculative-config); speculators: an EAGLE-3 head in the "
        "vLLM project's speculators format, which `vllm serve OUT` pairs with its verifier by itself",
    )
    e.add_argument("--verifier", type=Path, default=None, help="speculators: the target's folder (default: the embedded model)")
    e.add_argument("--num-speculative-tokens", type=int, default=3, help="speculators: the chain vLLM drafts (default 3)")
    e.set_defaults(func=cmd_export)


def launch_spec(method: str, draft: str | None, custom_target: bool):
    """The method spec with ``--draft`` as its drafter; a shipped drafter is refused for another target."""
    from speculab.methods import parse_method, require_own_drafter

    spec = parse_method(method)
    if draft is not None:
        key = spec.method.drafter
        if key is None:
            raise ValueError(f"--draft does not apply to --method {spec.name}")
        spec = parse_method(f"{method}{',' if ':' in method else ':'}{key}={draft}")
    if custom_target:
        require_own_drafter(spec, "--draft PATH")
    return spec


def cmd_launch(args: argparse.Namespace) -> int:
    from speculab.launch.command import ServingRoom
    from speculab.launch.prepare import prepare
    from speculab.launch.server import EngineServer
    from speculab.models.embedded import ensure_embedded_model

    if args.tp < 1:
        raise ValueError("--tp must be at least 1")
    for flag, value in (("--max-model-len", args.max_model_len), ("--kv-cache-gib", args.kv_cache_gib)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} {value}: give a positive number")
    target = Path(args.model) if args.model else ensure_embedded_model()
    if not (target / "config.json").exists():
        raise ValueError(f"--model {target}: no config.json there; give a local HF checkpoint folder")
    spec = launch_spec(args.method, args.draft, args.model is not None)
    out = args.out or Path("runs") / f"launch-{args.engine}-{spec.name}-{datetime.now():%Y%m%d-%H%M%S}"
    command = prepare(
        args.engine,
        spec,
        target,
        out,
        port=args.port,
        tp=args.tp,
        version=args.engine_version,
        python=args.python,
        print_only=args.print_only,
        dtype=args.dtype,
        room=ServingRoom(args.max_model_len, args.kv_cache_gib),
    )
    print(command.explain(), flush=True)
    if args.print_only:
        print(json.dumps(command.record() | {"run_dir": str(out)}))
        return 0
    server = EngineServer(command, out / "server.log", args.startup_timeout)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a plain kill also stops the server (via the finally)
    try:
        server.start()
        print(
            f"speculab: {command.engine} {command.version} serves {command.served_name} at {command.url}; log: {out / 'server.log'}; Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        print(json.dumps(command.record() | {"run_dir": str(out), "url": command.url, "log": str(out / "server.log")}), flush=True)
        server.process.wait()
        raise RuntimeError(f"{command.engine} exited with {server.process.returncode}; see {out / 'server.log'}")
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _speculators(args: argparse.Namespace):
    from speculab.launch.export import SpeculatorsFormat
    from speculab.models.embedded import resolve_model_path

    if args.format != "speculators":
        return None
    return SpeculatorsFormat(resolve_model_path(args.verifier), args.num_speculative_tokens)


def cmd_export(args: argparse.Namespace) -> int:
    from speculab.drafters import draft_vocab_size
    from speculab.launch.export import drafter_kind, export_drafter
    from speculab.methods import method

    if not (args.drafter / "config.json").exists():
        raise ValueError(f"{args.drafter}: no config.json; give a drafter folder (an EAGLE head or a draft model)")
    kind = drafter_kind(args.drafter)
    vocab = args.draft_vocab.lower()
    if vocab not in ("auto", "none") and not vocab.isdigit():
        raise ValueError(f"--draft-vocab {args.draft_vocab}: give a number of tokens, auto or none")
    wanted = None if vocab == "none" else vocab if vocab == "auto" else int(vocab)
    size = draft_vocab_size({"draft_vocab": wanted}, args.drafter, method(kind).auto_draft_vocab)
    exported = export_drafter(args.drafter, args.engine, args.out, size, _speculators(args))
    print(
        json.dumps(
            {
                "out": str(exported.folder),
                "kind": exported.kind,
                "engine": exported.engine,
                "format": args.format,
                "token_map": str(exported.token_map) if exported.token_map else None,
            }
        )
    )
    return 0
