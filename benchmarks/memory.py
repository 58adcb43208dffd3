"""Memory: the worked example of docs/memory.md (a 70B target on four 24 GB GPUs, by formula), and the peak RSS of
one process serving the embedded model on this machine.

Subcommands (``--help`` on each says more):
- ``example``: Llama-3.3-70B AWQ on 4×24 GB GPUs: plain decoding, a 1B draft model, the EAGLE-2 head;
- ``rss``: peak RSS of loading the embedded model and decoding at batch size 1 after a 1,200-token prompt.
Knows: ``speculab.models.memory``'s accounting and the assumptions below (``example``), and what Linux reports of
this process (``rss``). Does not know: any GPU (``example`` runs nothing), another engine's memory.
Usage: python benchmarks/memory.py COMMAND [options]. The last stdout line is one JSON document.
"""

from __future__ import annotations

import json
import resource

from common import command_line, run_subcommand, subcommand

from speculab.compare.peers import code_prompts
from speculab.engine import Engine
from speculab.models.config import CONFIGS
from speculab.models.memory import eagle_head_parameters, estimate
from speculab.runtime import load
from speculab.sampling import SamplingParams

MiB, GiB = 2**20, 2**30
DEVICE_BYTES = 24_564 * MiB  # one RTX 4090 as nvidia-smi reports it (24564 MiB)
GPU_MEMORY_UTILIZATION = 0.90  # vLLM's --gpu-memory-utilization
OVERHEAD_BYTES = 2 * GiB  # per GPU: CUDA context, NCCL/cuBLAS workspaces, peak activations, CUDA graphs
TENSOR_PARALLEL = 4
DTYPE_BYTES = 2  # bf16/fp16: drafter weights and both KV caches

MODES = {  # name: (drafter kind, drafter config, drafter tensor parallel)
    "baseline": (None, None, None),
    "draft": ("draft", CONFIGS["llama-3.2-1b"], None),
    "eagle": ("eagle", None, None),
    "eagle_draft_tp1": ("eagle", None, 1),
}


def example(args) -> None:
    """The worked memory example of docs/memory.md: Llama-3.3-70B AWQ on 4×24 GB GPUs (tensor parallel 4).

    Plain decoding vs a Llama-3.2-1B draft model (bf16) vs the 70B EAGLE-2 head (bf16), and the head as vLLM 0.7.3 had
    to run it (draft tensor parallel 1). Every figure comes from speculab.models.memory; the assumptions are the
    constants of this script.
    """
    target = CONFIGS["llama-3.3-70b"]
    results = {}
    for name, (kind, drafter_cfg, drafter_tp) in MODES.items():
        results[name] = estimate(
            target,
            kind,
            drafter_cfg,
            DTYPE_BYTES,
            DEVICE_BYTES,
            TENSOR_PARALLEL,
            target_weight_format="awq",
            memory_utilization=GPU_MEMORY_UTILIZATION,
            overhead_bytes=OVERHEAD_BYTES,
            drafter_tensor_parallel=drafter_tp,
        )
    base_tokens = results["baseline"]["kv_capacity_tokens"]
    for name, r in results.items():
        tokens = r["kv_capacity_tokens"]
        print(
            f"{name:16s} weights/GPU {r['weights_bytes_per_device'] / 1e9:6.3f} GB  "
            f"KV/token/GPU {r['kv_bytes_per_token_per_device']:6d} B  KV free/GPU {r['kv_free_bytes_per_device'] / 1e9:6.3f} GB  "
            f"tokens {tokens:7d} ({tokens / r['session_tokens']:.2f} x 32k, {r['kv_capacity_sessions']} whole)  "
            f"vs baseline {100 * (tokens / base_tokens - 1):+.1f}%"
        )
    summary = {
        "assumptions": {
            "device_bytes": DEVICE_BYTES,
            "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
            "overhead_bytes_per_gpu": OVERHEAD_BYTES,
            "tensor_parallel": TENSOR_PARALLEL,
            "dtype_bytes": DTYPE_BYTES,
            "target_weights": "AWQ int4, group 128, fp16 scales, 4-bit zeros; embedding/lm_head/norms fp16",
        },
        "eagle_head_parameters_with_fc_bias": eagle_head_parameters(target, fc_bias=True),
        "modes": results,
        "kv_capacity_change_vs_baseline": {n: r["kv_capacity_tokens"] / base_tokens - 1 for n, r in results.items()},
        "kv_free_bytes_all_gpus": {n: r["kv_free_bytes_per_device"] * TENSOR_PARALLEL for n, r in results.items()},
    }
    print(json.dumps(summary, sort_keys=True))


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss(args) -> None:
    """Peak RSS of loading the embedded model and decoding at batch size 1 after a 1,200-token prompt.

    Run it in a fresh process for each dtype: the peak is the process's, from its start.
    """
    result = {"dtype": args.dtype, "after_import_mb": rss_mb()}
    loaded = load(None, args.dtype)
    result |= {"after_load_mb": rss_mb(), "peak_after_load_mb": peak_mb()}
    prompts = code_prompts(loaded.tokenizer, 1200, 1)
    engine = Engine(loaded.model, max_batch=1, max_seq_len=1400)
    engine.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True))
    result |= {"after_generate_mb": rss_mb(), "peak_mb": peak_mb(), "prompt_tokens": len(prompts[0])}
    print(json.dumps(result))


def main() -> None:
    parser, sub = command_line(__doc__)
    subcommand(sub, "example", example)
    subcommand(sub, "rss", rss).add_argument("dtype", nargs="?", default="bfloat16", choices=["bfloat16", "float32"])
    run_subcommand(parser)


if __name__ == "__main__":
    main()
