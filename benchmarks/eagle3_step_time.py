"""An EAGLE-3 training step online (the target run over the batch) and on cached features, part by part.

Reads the self-distilled data of ``speculab train data`` and the EAGLE-3 feature cache that
``speculab train eagle3`` builds beside it (DATA_DIR/eagle3-features), makes the same batches both ways
and times: making the batch (the target's forward online; the lm_head over the stored final hidden
states cached), the head's unrolled forward, and the backward. Also reports how far the cached batch
is from the online one (the features' relative difference per layer, the target log-probabilities'
largest difference, top-1 agreement). Medians over the batches, with [min, max].

    python benchmarks/eagle3_step_time.py --batches 6

The last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from speculab import runtime
from speculab.cpu import reported_cpu_flags
from speculab.files import cache_dir
from speculab.models.loading import load_model
from speculab.train.distill_data import batches_by_tokens, load_features, read_sequences
from speculab.train.eagle3 import make_batch, make_cached_batch, new_eagle3_head, ttt_loss
from speculab.train.eagle3_features import FOLDER, cached_layer_features


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def step_parts(head, target, target_ids, batch_fn, group, ttt_steps):
    batch, make_s = timed(lambda: batch_fn(target, target_ids, group))
    (loss, _), forward_s = timed(lambda: ttt_loss(head, target, batch, ttt_steps))
    _, backward_s = timed(loss.backward)
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


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=None, help="default: the embedded model's first data folder")
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--ttt-steps", type=int, default=5)
    p.add_argument("--draft-vocab", type=int, default=8192)
    args = p.parse_args()
    loaded = runtime.load(None, dtype="float32")
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
        **{way: {part: summary([t[part] for t in ts]) for part in ts[0]} for way, ts in times.items()},
        "speedup_median": round(statistics.median(o["step"] / c["step"] for o, c in zip(times["online"], times["cached"])), 2),
        "feature_rel_diff_max": [max(d["feature_rel_diff"][k] for d in diffs) for k in range(3)],
        "logp_max_abs_diff": max(d["logp_max_abs_diff"] for d in diffs),
        "top1_agreement_min": min(d["top1_agreement"] for d in diffs),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
