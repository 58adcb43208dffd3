"""Held-out τ of an EAGLE-3 training run's intermediate checkpoints: would early stopping have stopped it?

Each checkpoint (``OUT/state/checkpoint.pt`` copied during a run) is written in the published layout and run
greedily with the target on held-out training-share prompts (``DataSpec`` seed 2000, files outside the head's
``training_files.json``), as the trainer's card check does. Usage:
python benchmarks/eagle3_checkpoints.py --head speculab/assets/smollm2-135m-eagle3 --checkpoints step100.pt ...
[--spec 'eagle3:num_steps=3,topk=2,num_draft_tokens=4,batch_budget=none'] [--prompts 12] [--max-tokens 96]
[--beside 'eagle:num_steps=3,topk=2,num_draft_tokens=4,batch_budget=none'] (other methods measured on the same
prompts, e.g. the shipped EAGLE-1 head: held out only if its training files are among the run's, as the shipped
heads' seeds are). The last stdout line is one JSON document.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from speculab.cpu import reported_cpu_flags
from speculab.methods import METHODS, new_proposer, parse_method, proposer_options
from speculab.models.loading import load_model
from speculab.runtime import load
from speculab.train.card import measure_acceptance
from speculab.train.eagle3 import new_eagle3_head, save_eagle3_head
from speculab.train.training_prompts import held_out_prompts


def export(checkpoint: Path, target, raw: dict, out: Path) -> int:
    """Write ``checkpoint``'s head to ``out``; returns its training step."""
    state = torch.load(checkpoint, weights_only=True)
    weights = state["model"]
    target_ids = weights["d2t"] + torch.arange(len(weights["d2t"]))
    head = new_eagle3_head(target, target_ids)
    head.load_state_dict(weights)
    save_eagle3_head(head, raw, out)
    return int(state["step"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--head", type=Path, required=True, help="the run's output folder (its config and training_files.json)")
    p.add_argument("--checkpoints", type=Path, nargs="+", required=True)
    p.add_argument("--spec", default="eagle3:num_steps=3,topk=2,num_draft_tokens=4,batch_budget=none")
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--beside", nargs="*", default=[], help="method specs measured once on the same prompts")
    args = p.parse_args()
    loaded = load()
    target = load_model(loaded.path, torch.float32, loaded.device, prepack=False)
    raw = json.loads((loaded.path / "config.json").read_text())
    used = set(json.loads((args.head / "training_files.json").read_text()))
    prompts = held_out_prompts(loaded.tokenizer, used, args.prompts, 2000)
    rows = []
    for checkpoint in args.checkpoints:
        with tempfile.TemporaryDirectory() as folder:
            step = export(checkpoint, target, raw, Path(folder))
            spec = parse_method(f"{args.spec},{METHODS['eagle3'].drafter}={folder}")
            result = measure_acceptance(loaded, new_proposer(spec, proposer_options(spec, loaded)), prompts, args.max_tokens)
        rows.append({"checkpoint": str(checkpoint), "step": step, **result})
        conditional = " / ".join(f"{c:.2f}" for c in result["conditional_acceptance"])
        print(f"step {step:5d}  τ {result['mean_acceptance_length']:.3f}  conditional {conditional}", file=sys.stderr)
    beside = []
    for text in args.beside:
        spec = parse_method(text)
        result = measure_acceptance(loaded, new_proposer(spec, proposer_options(spec, loaded)), prompts, args.max_tokens)
        beside.append({"spec": text, **result})
        print(f"{text}  τ {result['mean_acceptance_length']:.3f}", file=sys.stderr)
    record = {"cpu_flags": reported_cpu_flags(), "dtype": loaded.dtype, "spec": args.spec, "checkpoints": rows, "beside": beside}
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
