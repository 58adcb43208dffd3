"""Self-distillation throughput: answered tokens per minute, fixed groups (before) vs continuous batching (now).

Both answer the same training-share prompts (``DataSpec`` seed 11, never the benchmark's files) with the same
sampling settings on the embedded model, 16 slots, recording the target's features as ``train data`` does.
*groups*: ``Engine.generate`` on 16 prompts at a time, the way ``train data`` ran before (a group waits for its
longest answer). *continuous*: ``distill_data.generate_sequences``, every prompt queued at once. Usage:
python benchmarks/distill_throughput.py [--prompts 32] [--repeats 3]. Interleaved repeats, medians with
[min, max]; the last stdout line is one JSON document.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine
from speculab.models.linear import linear_kind
from speculab.runtime import load
from speculab.train.distill_data import FeatureRecorder, answer_params, generate_sequences
from speculab.train.training_prompts import DataSpec, draw_prompts

SLOTS = 16


def in_groups(loaded, spec: DataSpec, prompts: list[dict]) -> int:
    params = answer_params(prompts, spec)
    max_len = max(len(p["prompt_ids"]) for p in prompts) + spec.response_tokens + 8
    recorder = FeatureRecorder()
    engine = Engine(loaded.model, SLOTS, max_len, loaded.tokenizer.stop_ids, recorder)
    answered = 0
    for i in range(0, len(prompts), SLOTS):
        for request in engine.generate([p["prompt_ids"] for p in prompts[i : i + SLOTS]], params[i : i + SLOTS]):
            recorder.take(request.id)
            answered += len(request.output_ids)
    return answered


def continuous(loaded, spec: DataSpec, prompts: list[dict]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        records = generate_sequences(loaded, spec, Path(folder), batch_size=SLOTS, prompts=prompts)
        return sum(len(r["response_ids"]) for r in records)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded = load()
    spec = DataSpec(num_prompts=args.prompts, seed=11)
    prompts = draw_prompts(loaded.tokenizer, spec)  # drawn once, outside the timing (it reads the corpora)
    runs = {"groups": [], "continuous": []}
    for _ in range(args.repeats):
        for name, run in (("groups", in_groups), ("continuous", continuous)):
            began = time.perf_counter()
            tokens = run(loaded, spec, prompts)
            runs[name].append(tokens / (time.perf_counter() - began) * 60)
            print(name, f"{runs[name][-1]:.0f} answered tokens/min ({tokens} tokens)", file=sys.stderr)
    summary = {k: {"median": round(statistics.median(v)), "min": round(min(v)), "max": round(max(v))} for k, v in runs.items()}
    print(
        json.dumps(
            {
                "cpu_flags": reported_cpu_flags(),
                "dtype": loaded.dtype,
                "linear_kernels": linear_kind(loaded.model),
                "slots": SLOTS,
                "prompts": args.prompts,
                "response_tokens": spec.response_tokens,
                "answered_tokens_per_minute": summary,
                "continuous_vs_groups": round(summary["continuous"]["median"] / summary["groups"]["median"], 3),
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
