"""An offline cache of what an EAGLE-3 head is fed: three target layers' inputs, per self-distilled sequence.

Knows:
- where it lives: ``DATA_DIR/eagle3-features/``, beside the data it was made from, one shard per data
  shard (same file name), tensor ``"<id>"`` [num_tokens - 1, 3 * hidden] in bf16: position t holds the
  inputs of the three layers (``eagle3_feature_layers``) after the target read token t, side by side;
- who computes them: the target as the engine runs it (its kernels and packing), over each whole
  sequence in one causal forward, batched by a cap on tokens. At inference the head is fed the same
  model's features, so training sees what drafting sees;
- that a cache made for another target or other layers is refused (``spec.json`` names them), and
  that a killed build resumes from the shards already written, with a progress bar.

Why a cache: trained online, the target's forward over a batch is about two thirds of an EAGLE-3
step on this CPU (BENCHMARKS.md). The loss needs no cached logits: the data's final hidden states (the
EAGLE-1 features, the target's post-norm output) through the target's lm_head give its distribution
exactly, for one lm_head product a step. That is how SpecForge's offline mode works too, and why
top-k distillation (storing a truncated distribution) is not needed here.

Does not know: the loss (``eagle3.py``) or which data folders there are (``pipeline.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from speculab.models.eagle3_head import eagle3_feature_layers
from speculab.models.llama import Transformer, causal_batch
from speculab.train.distill_data import group_by_tokens

FOLDER = "eagle3-features"
STORED_DTYPE = torch.bfloat16  # 1.4 GB for the shipped data's 413k tokens (fp32: twice that)


def _spec(model: Transformer, model_name: str) -> dict:
    layers = eagle3_feature_layers(model.config.num_layers)
    return {"target": model_name, "layers": list(layers), "hidden_size": model.config.hidden_size, "dtype": str(STORED_DTYPE)}


def _check_spec(folder: Path, spec: dict) -> None:
    path = folder / "spec.json"
    if path.exists():
        found = json.loads(path.read_text())
        if found != spec:
            raise ValueError(f"{path} was made for {found}, not {spec}; delete {folder} to rebuild it")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(spec) + "\n")


@torch.no_grad()
def layer_features(model: Transformer, sequences: list[list[int]]) -> list[torch.Tensor]:
    """Each sequence's three layers' inputs [len - 1, 3 * hidden] (fp32), from one padded causal forward."""
    layers = eagle3_feature_layers(model.config.num_layers)
    device = model.norm.weight.device
    lengths = [len(s) for s in sequences]
    bsz, n = len(sequences), max(lengths)
    tokens = torch.zeros(bsz, n, dtype=torch.long, device=device)
    for i, ids in enumerate(sequences):
        tokens[i, : len(ids)] = torch.tensor(ids, device=device)
    cache = model.new_cache(bsz, n)
    batch = causal_batch(torch.arange(bsz, device=device), torch.zeros(bsz, dtype=torch.long, device=device), n)
    # padding sits after each row's tokens, so a causal row never reads it
    out = model(tokens, batch, cache, logits_at=torch.zeros(bsz, 1, dtype=torch.long, device=device), capture_layers=layers)
    fused = torch.cat([out.captured[i] for i in layers], dim=-1).float().cpu()
    return [fused[i, : length - 1] for i, length in enumerate(lengths)]


def _tokens(record: dict) -> int:
    return len(record["prompt_ids"]) + len(record["response_ids"])


def cached_layer_features(
    model: Transformer, model_name: str, data_dir: Path, records: list[dict], batch_tokens: int = 2048
) -> dict[str, torch.Tensor]:
    """Sequence id -> [num_tokens - 1, 3 * hidden] (bf16) for ``records`` of ``data_dir``, computing the missing shards."""
    folder = data_dir / FOLDER
    _check_spec(folder, _spec(model, model_name))
    by_shard: dict[str, list[dict]] = {}
    for record in records:
        by_shard.setdefault(record["features_file"], []).append(record)
    todo = {shard: rs for shard, rs in by_shard.items() if not (folder / shard).exists()}
    if todo:
        with tqdm(total=sum(len(rs) for rs in todo.values()), desc=f"EAGLE-3 features ({data_dir.name})", unit="seq") as bar:
            for shard, shard_records in sorted(todo.items()):
                tensors = {}
                for group in group_by_tokens(sorted(shard_records, key=_tokens), _tokens, batch_tokens):
                    rows = layer_features(model, [r["prompt_ids"] + r["response_ids"] for r in group])
                    tensors |= {r["id"]: f.to(STORED_DTYPE).contiguous() for r, f in zip(group, rows)}
                    bar.update(len(group))
                tmp = folder / (shard + ".tmp")
                save_file(tensors, str(tmp))
                tmp.replace(folder / shard)  # a kill mid-write leaves no shard that looks finished
    features: dict[str, torch.Tensor] = {}
    for shard, shard_records in by_shard.items():
        stored = load_file(folder / shard)
        for record in shard_records:
            rows = _tokens(record) - 1
            found = stored.get(record["id"])
            if found is None or found.shape[0] != rows:
                what = "no tensor" if found is None else f"{found.shape[0]} rows, not {rows}, in tensor"
                raise ValueError(f"{folder / shard} has {what} {record['id']}; delete {folder} to rebuild it")
            features[record["id"]] = found
    return features
