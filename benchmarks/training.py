"""Training drafters, measured: held-out τ of a run's checkpoints, an EAGLE-3 training step online against cached
features, and self-distillation's throughput.

Subcommands (``--help`` on each says more):
- ``checkpoints``: held-out τ of a training run's intermediate checkpoints (an EAGLE-3 head or a draft model);
- ``step-time``: an EAGLE-3 training step online (the target run over the batch) and on cached features, part by part;
- ``distill``: answered tokens per minute of self-distillation, fixed groups against continuous batching.
Knows: the embedded model as the target; training-share prompts (never the benchmark's files), held out from the
run's ``training_files.json`` where τ is measured. Does not know: a drafter's cost at inference (``drafters.py``) or
the benchmark's workload.
Usage: python benchmarks/training.py COMMAND [options]. The last stdout line is one JSON document.
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import clocked, command_line, run_subcommand, spread, subcommand

from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine
from speculab.files import cache_dir
from speculab.methods import METHODS, new_proposer, parse_method, proposer_options
from speculab.models.linear import linear_kind
from speculab.models.loading import load_model
from speculab.runtime import load
from speculab.train.card import measure_acceptance
from speculab.train.distill_data import (
    FeatureRecorder,
    answer_params,
    batches_by_tokens,
    generate_sequences,
    load_features,
    read_sequences,
)
from speculab.train.draft import new_draft, save_draft
from speculab.train.eagle3 import make_batch, make_cached_batch, new_eagle3_head, save_eagle3_head, ttt_loss
from speculab.train.eagle3_features import FOLDER, cached_layer_features
from speculab.train.training_prompts import DataSpec, draw_prompts, held_out_prompts

SLOTS = 16  # self-distillation's engine slots


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


def held_out_tau(loaded, text: str, prompts, max_tokens: int) -> dict:
    """The trainer's card check (``measure_acceptance``) of the method ``text`` on ``prompts``."""
    spec = parse_method(text)
    return measure_acceptance(loaded, new_proposer(spec, proposer_options(spec, loaded)), prompts, max_tokens)


def checkpoints(args) -> None:
    """Held-out τ of a drafter training run's intermediate checkpoints (an EAGLE-3 head or a draft model).

    Each checkpoint (``OUT/state/checkpoint.pt`` copied during a run) is written in the published layout (an EAGLE-3
    head, or an HF-layout draft model whose shape is read from its tensors) and run greedily with the target on
    held-out training-share prompts (``DataSpec`` seed 2000, files outside the run's ``training_files.json``), as the
    trainer's card check does: would early stopping have stopped it, has it passed the shipped drafter? ``--beside``:
    other methods measured on the same prompts, e.g. the shipped EAGLE-1 head (held out only if its training files
    are among the run's, as the shipped heads' seeds are). A draft model's run:
    ``--spec 'draft:num_speculative_tokens=3,draft_vocab=none'``.
    """
    kind = args.spec.split(":")[0]
    if kind not in EXPORTS:  # before the target loads
        sys.exit(f"--spec {args.spec}: checkpoints of {kind} runs cannot be exported (only {', '.join(EXPORTS)})")
    loaded = load()
    target = load_model(loaded.path, torch.float32, loaded.device, prepack=False)
    raw = json.loads((loaded.path / "config.json").read_text())
    used = set(json.loads((args.head / "training_files.json").read_text()))
    prompts = held_out_prompts(loaded.tokenizer, used, args.prompts, 2000)
    rows = []
    for checkpoint in args.checkpoints:
        with tempfile.TemporaryDirectory() as folder:
            step = export(checkpoint, kind, target, loaded, raw, Path(folder))
            result = held_out_tau(loaded, f"{args.spec},{METHODS[kind].drafter}={folder}", prompts, args.max_tokens)
        rows.append({"checkpoint": str(checkpoint), "step": step, **result})
        conditional = " / ".join(f"{c:.2f}" for c in result["conditional_acceptance"])
        print(f"step {step:5d}  τ {result['mean_acceptance_length']:.3f}  conditional {conditional}", file=sys.stderr)
    beside = []
    for text in args.beside:
        beside.append({"spec": text, **held_out_tau(loaded, text, prompts, args.max_tokens)})
        print(f"{text}  τ {beside[-1]['mean_acceptance_length']:.3f}", file=sys.stderr)
    record = {"cpu_flags": reported_cpu_flags(), "dtype": loaded.dtype, "spec": args.spec, "checkpoints": rows, "beside": beside}
    print(json.dumps(record))


def step_parts(head, target, target_ids, batch_fn, group, ttt_steps):
    batch, make_s = clocked(lambda: batch_fn(target, target_ids, group))
    (loss, _), forward_s = clocked(lambda: ttt_loss(head, target, batch, ttt_steps))
    _, backward_s = clocked(loss.backward)
    head.zero_grad(set_to_none=True)
    return batch, {"batch": make_s, "head_forward": forward_s, "backward": backward_s, "step": make_s + forward_s + backward_s}


def differences(online, cached, group) -> dict:
    hidden = online.features.shape[-1] // 3
    valid = torch.zeros(online.features.shape[:2], dtype=torch.bool)
    targets = torch.zeros(cached.in_draft_vocab.shape, dtype=torch.bool)
    for row, (ids, *_) in enumerate(group):
        valid[row, : len(ids) - 1] = True
        targets[row, : len(ids) - 1 - online.start] = True
    per_layer = []
    for k in range(3):
        a, b = (x[..., k * hidden : (k + 1) * hidden][valid] for x in (online.features, cached.features))
        per_layer.append(float((a - b).norm() / a.norm()))
    columns = cached.target_logp.shape[1]
    logp_gap = (online.target_logp[:, :columns] - cached.target_logp)[targets].abs()
    top1 = online.target_logp[:, :columns].argmax(-1) == cached.target_logp.argmax(-1)
    return {
        "feature_rel_diff": per_layer,
        "logp_max_abs_diff": float(logp_gap.max()),
        "top1_agreement": float(top1[targets].float().mean()),
    }


def step_time(args) -> None:
    """An EAGLE-3 training step online (the target run over the batch) and on cached features, part by part.

    Reads the self-distilled data of ``speculab train data`` and the EAGLE-3 feature cache that ``speculab train
    eagle3`` builds beside it (DATA_DIR/eagle3-features), makes the same batches both ways and times: making the batch
    (the target's forward online; the lm_head over the stored final hidden states cached), the head's unrolled
    forward, and the backward. Also reports how far the cached batch is from the online one (the features' relative
    difference per layer, the target log-probabilities' largest difference, top-1 agreement). Medians over the
    batches, with [min, max].
    """
    loaded = load(None, dtype="float32")
    data_dir = args.data_dir or cache_dir() / "train-data" / loaded.path.name
    if not (data_dir / FOLDER).exists():
        raise SystemExit(f"{data_dir / FOLDER}: no feature cache; `speculab train eagle3` builds it")
    records = read_sequences(data_dir / "sequences.jsonl")
    final, fused = load_features(data_dir, records), cached_layer_features(loaded.model, loaded.path.name, data_dir, records)
    items = [(r["prompt_ids"] + r["response_ids"], final[r["id"]], len(r["prompt_ids"]), fused[r["id"]]) for r in records]
    target = load_model(loaded.path, torch.float32, loaded.device, prepack=False)
    target_ids = torch.arange(args.draft_vocab)  # which tokens does not change the cost
    head = new_eagle3_head(target, target_ids)
    stream = batches_by_tokens(items, args.batch_tokens, seed=0)
    times = {"online": [], "cached": []}
    diffs = []
    for i in range(args.batches):
        group = next(stream)
        online, t_online = step_parts(head, target, target_ids, make_batch, [g[:3] for g in group], args.ttt_steps)
        cached, t_cached = step_parts(head, target, target_ids, make_cached_batch, group, args.ttt_steps)
        times["online"].append(t_online)
        times["cached"].append(t_cached)
        diffs.append(differences(online, cached, group))
        print(f"batch {i}: {tuple(online.tokens.shape)} online {t_online['step']:.2f}s cached {t_cached['step']:.2f}s", flush=True)
    result = {
        "cpu_flags": reported_cpu_flags(),
        "threads": torch.get_num_threads(),
        "batches": args.batches,
        **{way: {part: spread((t[part] for t in ts), 3) for part in ts[0]} for way, ts in times.items()},
        "speedup_median": round(statistics.median(o["step"] / c["step"] for o, c in zip(times["online"], times["cached"])), 2),
        "feature_rel_diff_max": [max(d["feature_rel_diff"][k] for d in diffs) for k in range(3)],
        "logp_max_abs_diff": max(d["logp_max_abs_diff"] for d in diffs),
        "top1_agreement_min": min(d["top1_agreement"] for d in diffs),
    }
    print(json.dumps(result))


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


def distill(args) -> None:
    """Self-distillation throughput: answered tokens per minute, fixed groups (before) vs continuous batching (now).

    Both answer the same training-share prompts (``DataSpec`` seed 11, never the benchmark's files) with the same
    sampling settings on the embedded model, 16 slots, recording the target's features as ``train data`` does.
    *groups*: ``Engine.generate`` on 16 prompts at a time, the way ``train data`` ran before (a group waits for its
    longest answer). *continuous*: ``distill_data.generate_sequences``, every prompt queued at once. Interleaved
    repeats, medians with [min, max].
    """
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
    summary = {k: {stat: round(v) for stat, v in spread(values).items()} for k, values in runs.items()}
    record = {"cpu_flags": reported_cpu_flags(), "dtype": loaded.dtype, "linear_kernels": linear_kind(loaded.model), "slots": SLOTS}
    record |= {"prompts": args.prompts, "response_tokens": spec.response_tokens, "answered_tokens_per_minute": summary}
    print(
        json.dumps(record | {"continuous_vs_groups": round(summary["continuous"]["median"] / summary["groups"]["median"], 3), "runs": runs})
    )


def main() -> None:
    parser, sub = command_line(__doc__)
    p = subcommand(sub, "checkpoints", checkpoints)
    p.add_argument("--head", type=Path, required=True, help="the run's output folder (its config and training_files.json)")
    p.add_argument("--checkpoints", type=Path, nargs="+", required=True)
    p.add_argument("--spec", default="eagle3:num_steps=3,topk=2,num_draft_tokens=4,policy=off")
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--beside", nargs="*", default=[], help="method specs measured once on the same prompts")
    p = subcommand(sub, "step-time", step_time)
    p.add_argument("--data-dir", type=Path, default=None, help="default: the embedded model's first data folder")
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--ttt-steps", type=int, default=5)
    p.add_argument("--draft-vocab", type=int, default=8192)
    p = subcommand(sub, "distill", distill)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    run_subcommand(parser)


if __name__ == "__main__":
    main()
