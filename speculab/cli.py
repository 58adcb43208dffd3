"""The ``speculab`` command line.

``speculab generate``: decode a prompt, streaming text to stdout; with
``--json`` the last stdout line is one JSON object.
``speculab compare transformers|llama.cpp``: the peer benchmarks; their last
stdout line is one JSON object.
``speculab fetch``: fetch and convert the embedded default model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from speculab.runtime import DTYPES


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="local HF checkpoint folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="default: bf16 on CUDA or a CPU with AMX/AVX512-BF16, else fp32")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")


def cmd_generate(args: argparse.Namespace) -> int:
    from speculab.engine import Engine
    from speculab.runtime import load
    from speculab.sampling import SamplingParams

    loaded = load(args.model, args.dtype, args.device)
    tok = loaded.tokenizer
    prompt_ids = tok.encode_chat([{"role": "user", "content": args.prompt}]) if args.chat else tok.encode(args.prompt)
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed, ignore_eos=args.ignore_eos
    )
    engine = Engine(loaded.model, max_batch=1, max_seq_len=len(prompt_ids) + args.max_tokens + 1, stop_ids=tok.stop_ids)
    start = time.perf_counter()
    (request,) = engine.generate([prompt_ids], params, on_token=None if args.json else _printer(tok.stream_decoder()))
    end = time.perf_counter()
    if not args.json:
        print(flush=True)
        return 0
    n = len(request.output_ids)
    decode_s = request.token_times[-1] - request.token_times[0] if n > 1 else 0.0
    result = {
        "text": tok.decode(request.output_ids),
        "num_tokens": n,
        "prompt_tokens": len(prompt_ids),
        "tokens_per_s": (n - 1) / decode_s if decode_s > 0 else None,
        "ttft_s": request.ttft,
        "total_s": end - start,
        "finish_reason": request.finish_reason,
        "method": "baseline",
        "dtype": loaded.dtype,
        "device": loaded.device,
        "model": str(loaded.path),
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
    from speculab.bench import compare

    runner = {"transformers": compare.compare_transformers, "llama.cpp": compare.compare_llamacpp}[args.peer]
    result = runner(args)
    print(json.dumps(result))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from speculab.models.embedded import ensure_embedded_model

    print(ensure_embedded_model())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speculab", description="Speculative decoding, measured.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="decode one prompt")
    g.add_argument("--prompt", required=True)
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--ignore-eos", action="store_true", help="do not stop at the model's stop tokens")
    g.add_argument("--json", action="store_true", help="print one JSON object as the last stdout line")
    _add_model_args(g)
    g.set_defaults(func=cmd_generate)

    c = sub.add_parser("compare", help="benchmark speculab's baseline against a peer on the same model and prompt")
    c.add_argument("peer", choices=["transformers", "llama.cpp"])
    c.add_argument("--batch-size", type=int, default=1)
    c.add_argument("--max-tokens", type=int, default=128)
    c.add_argument("--prompt-tokens", type=int, default=1200)
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--threads", type=int, default=None, help="torch/llama.cpp threads (default: torch's choice)")
    c.add_argument("--quant", choices=["bf16", "q4_1"], default="bf16", help="llama.cpp only: GGUF type")
    _add_model_args(c)
    c.set_defaults(func=cmd_compare)

    f = sub.add_parser("fetch", help="fetch and convert the embedded default model into the cache")
    f.set_defaults(func=cmd_fetch)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"speculab: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
