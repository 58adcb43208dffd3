"""``speculab plan``: what a serving setup costs in memory, per rank, from config.json files alone (no weights).

For the target plain and beside each drafter asked for: weights per rank, the KV bytes one token costs per rank
(the target's and the drafter's), the KV memory left after weights and the stated overhead, the tokens and whole
sessions of ``--session-tokens`` that fit, and what each drafter costs against plain decoding. The arithmetic is
``models/memory.py``'s, the same that ``speculab bench`` records for its methods (docs/memory.md works the
study's Llama 3.3 70B AWQ example through it).

Knows: the flags, how a config is named (a folder, a config.json, or a named config), and the table. Does not
know: measured memory, how the engines allocate (vLLM's activation reserve is the caller's ``--overhead``), or
how a model is loaded: its ``--model`` names a config, never weights.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from speculab.models.config import CONFIGS, ModelConfig
from speculab.models.embedded import ensure_embedded_model
from speculab.models.memory import DRAFTER_KINDS, SESSION_TOKENS, estimate, machine_memory_bytes

WEIGHTS = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": "fp8", "awq-int4": "awq-int4", "gptq-int4": "gptq-int4"}
KV_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def memory_size(text: str) -> int:
    """Bytes of '24GiB', '24 GB', '80e9' or '25769803776'."""
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size such as 24GiB, 80GB or 25769803776")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def model_config(name: str | None) -> tuple[ModelConfig, dict]:
    """A named config, a config.json, or a folder holding one (None: the embedded model); with its raw dict."""
    if name in CONFIGS:
        return CONFIGS[name], {}
    path = Path(name) if name else ensure_embedded_model()
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise ValueError(f"{name}: no config.json there and no named config ({', '.join(CONFIGS)})")
    return ModelConfig.from_file(path), json.loads(path.read_text())


def drafter(text: str) -> tuple[str, str | None]:
    """``KIND[:CONFIG]``: a draft model needs its config; an EAGLE head is sized like the target unless given one."""
    kind, _, config = text.partition(":")
    if kind not in DRAFTER_KINDS or (kind == "draft" and not config):
        raise argparse.ArgumentTypeError(f"--drafter {text!r}: give draft:CONFIG, eagle[:CONFIG] or eagle3[:CONFIG]")
    return kind, config or None


def add_plan_parser(sub) -> None:
    p = sub.add_parser("plan", help="memory and KV capacity per rank of a serving setup, from config.json files alone")
    p.add_argument(
        "--model",
        "--target",
        dest="model",
        default=None,
        help=f"the target: a checkpoint folder, a config.json or a named config ({', '.join(CONFIGS)}; default: the embedded model)",
    )
    p.add_argument(
        "--drafter",
        type=drafter,
        action="append",
        default=[],
        metavar="KIND[:CONFIG]",
        help="draft:CONFIG, eagle[:CONFIG], eagle3[:CONFIG] (repeatable)",
    )
    p.add_argument("--weights", choices=list(WEIGHTS), default="bf16", help="the target's weights (default bf16)")
    p.add_argument("--drafter-dtype", choices=["fp32", "bf16", "fp16"], default="bf16", help="the drafter's weights")
    p.add_argument("--kv-dtype", choices=list(KV_DTYPES), default="bf16", help="both KV caches (default bf16)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel ranks")
    p.add_argument("--drafter-tp", type=int, default=None, help="ranks the drafter runs on (default: all)")
    p.add_argument("--device-memory", type=memory_size, default=None, help="one device's memory, e.g. 24GiB (default: this machine's)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="the share of it the engine may use (vLLM's)")
    p.add_argument("--overhead", type=memory_size, default=0, help="per device: activations, CUDA graphs, the runtime (e.g. 2GiB)")
    p.add_argument("--session-tokens", type=int, default=SESSION_TOKENS, help="tokens of one session")
    p.set_defaults(func=cmd_plan)


def plan(args: argparse.Namespace) -> dict[str, dict]:
    """Each setup's ``models.memory.estimate``, plain decoding first, by label."""
    if args.tp < 1 or not 0 < args.gpu_memory_utilization <= 1 or args.session_tokens < 1:
        raise ValueError("--tp and --session-tokens must be >= 1 and --gpu-memory-utilization in (0, 1]")
    target, _ = model_config(args.model)
    common = dict(
        dtype_bytes=WEIGHTS[args.drafter_dtype],
        device_bytes=args.device_memory if args.device_memory is not None else machine_memory_bytes(),
        tensor_parallel=args.tp,
        target_weight_format=WEIGHTS[args.weights],
        kv_dtype_bytes=KV_DTYPES[args.kv_dtype],
        memory_utilization=args.gpu_memory_utilization,
        overhead_bytes=args.overhead,
        session_tokens=args.session_tokens,
    )
    setups = {"plain": estimate(target, **common)}
    for kind, config in args.drafter:
        drafter_cfg, raw = model_config(config) if config else (None, {})
        options = {"draft_vocab_size": raw["draft_vocab_size"]} if kind == "eagle3" and "draft_vocab_size" in raw else {}
        label = f"{kind}:{config}" if config else kind
        setups[label] = estimate(target, kind, drafter_cfg, drafter_tensor_parallel=args.drafter_tp, **common, **options)
    return setups


def cmd_plan(args: argparse.Namespace) -> int:
    setups = plan(args)
    base = setups["plain"]["kv_capacity_tokens"]
    print(
        f"{'setup':28s} {'weights/rank':>14s} {'KV B/token/rank':>16s} {'KV free/rank':>14s} {'tokens':>10s} {'sessions':>9s} {'vs plain':>9s}"
    )
    for label, e in setups.items():
        change = f"{100 * (e['kv_capacity_tokens'] / base - 1):+.1f}%" if base else "n/a"
        print(
            f"{label:28s} {e['weights_bytes_per_device'] / 1e9:11.3f} GB {e['kv_bytes_per_token_per_device']:16,d} "
            f"{e['kv_free_bytes_per_device'] / 1e9:11.3f} GB {e['kv_capacity_tokens']:10,d} {e['kv_capacity_sessions']:9d} {change:>9s}"
        )
    print(json.dumps({"setups": setups}))
    return 0
