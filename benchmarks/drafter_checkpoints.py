"""Held-out τ of a drafter training run's intermediate checkpoints (an EAGLE-3 head or a draft model).

Each checkpoint (``OUT/state/checkpoint.pt`` copied during a run) is written in the published layout (an EAGLE-3
head, or an HF-layout draft model whose shape is read from its tensors) and run greedily with the target on
held-out training-share prompts (``DataSpec`` seed 2000, files outside the run's ``training_files.json``), as the
trainer's card check does: would early stopping have stopped it, has it passed the shipped drafter? Usage:
python benchmarks/drafter_checkpoints.py --head speculab/assets/smollm2-135m-eagle3 --checkpoints step100.pt ...
[--spec 'eagle3:num_steps=3,topk=2,num_draft_tokens=4,batch_budget=none'] [--prompts 12] [--max-tokens 96]
[--beside 'eagle:num_steps=3,topk=2,num_draft_tokens=4,batch_budget=none'] (other methods measured on the same
prompts, e.g. the shipped EAGLE-1 head: held out only if its training files are among the run's, as the shipped
heads' seeds are). A draft model's run: ``--spec 'draft:num_speculative_tokens=3,draft_vocab=none'``. The last
stdout line is one JSON document.
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
from speculab.train.draft import new_draft, save_draft
from speculab.train.eagle3 import new_eagle3_head, save_eagle3_head
from speculab.train.training_prompts import held_out_prompts


def export_eagle3(weights: dict, target, loaded, raw: dict, out: Path) -> None:
    target_ids = weights["d2t"] + torch.arange(len(weights["d2t"]))
    head = new_eagle3_head(target, target_ids)
    head.load_state_dict(weights)
    save_eagle3_head(head, raw, out)


def export_draft(weights: dict, target, loaded, raw: dict, out: Path) -> None:
    hidden = weights["model.embed_tokens.weight"].shape[1]
    layers = len({name.split(".")[2] for name in weights if name.startswith("model.layers.")})
    intermediate = weights["model.layers.0.mlp.gate_proj.weight"].shape[0]
    draft = new_draft(raw, target.embed_tokens.weight, hidden, layers, intermediate)
    draft.load_state_dict(weights)
    save_draft(draft, loaded.path, out)


EXPORTS = {"eagle3": export_eagle3, "draft": export_draft}


def export(checkpoint: Path, kind: str, target, loaded, raw: dict, out: Path) -> int:
    """Write ``checkpoint``'s drafter (``kind``: eagle3 or draft) to ``out``; returns its training step."""
    state = torch.load(checkpoint, weights_only=True)
    EXPORTS[kind](state["model"], target, loaded, raw, out)
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
    kind = args.spec.split(":")[0]
    if kind not in EXPORTS:  # before the target loads
        p.error(f"--spec {args.spec}: checkpoints of {kind} runs cannot be exported (only {', '.join(EXPORTS)})")
    loaded = load()
    target = load_model(loaded.path, torch.float32, loaded.device, prepack=False)
    raw = json.loads((loaded.path / "config.json").read_text())
    used = set(json.loads((args.head / "training_files.json").read_text()))
    prompts = held_out_prompts(loaded.tokenizer, used, args.prompts, 2000)
    rows = []
    for checkpoint in args.checkpoints:
        with tempfile.TemporaryDirectory() as folder:
            step = export(checkpoint, kind, target, loaded, raw, Path(folder))
            spec = parse_method(f"{args.spec},{METHODS[kind].drafter}={folder}")
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
