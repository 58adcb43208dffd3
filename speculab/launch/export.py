"""Drafters in the layouts vLLM and SGLang load: ``speculab export --for {vllm,sglang} DRAFTER OUT``.

Knows, per drafter kind (told apart by its tensor names; a kind is the method that drafts with it, whose entry in
``methods.METHODS`` names the layout each engine loads):
- **EAGLE-1/2 head** (``fc.weight`` [H, 2H], ``layers.0.*``). speculab's heads, like the
  published ones, have an fc bias. vLLM's ``EagleLlamaForCausalLM`` has no fc bias: it drops
  ``fc.bias`` silently and reads ``"bias": true`` in the config as attention biases it then
  leaves random. For vLLM the bias is folded, exactly: fc's output enters layer 0 with no input
  norm and is also the residual, so q/k/v gain the bias ``W·b`` and o_proj the bias ``b``; the
  config says ``attention_bias: true``, ``bias: false``. SGLang's ``LlamaForCausalLMEagle`` keeps
  the fc bias, so its copy is the head as it is. A reduced draft vocabulary becomes SGLang's
  ``--speculative-token-map`` (a torch file of the kept token ids); vLLM has none.
- **EAGLE-3 head** (``midlayer.*``, ``d2t``): the published layout both engines load;
  ``architectures`` is set to ``LlamaForCausalLMEagle3``.
- **EAGLE-3 head, speculators format** (``--format speculators``, vLLM only): ``speculators_format.py``.
- **Draft model**: a clean HF folder (config, weights, tokenizer, generation config). Both
  engines read every ``.safetensors`` in a folder as weights, so speculab's
  ``draft_vocab.safetensors`` and training files stay behind.

Each export writes ``speculab_export.json`` (source, its checksum, what changed). Loading is
safetensors only.

Does not know: the engines' command lines (``vllm.py``, ``sglang.py``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from speculab.files import sha256_of
from speculab.launch.speculators_format import refuse, write_speculators
from speculab.method_engines import Layout
from speculab.methods import method
from speculab.models.draft_vocab import load_token_ranking
from speculab.models.loading import CheckpointError

ENGINES = ("vllm", "sglang")
MANIFEST = "speculab_export.json"
TOKEN_MAP = "token_map.pt"
HF_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "tokenizer.model",
)


@dataclass(frozen=True)
class Exported:
    folder: Path
    kind: str  # "eagle", "eagle3" or "draft"
    engine: str
    token_map: Path | None = None  # SGLang's --speculative-token-map, when a reduced vocabulary was asked for


def drafter_kind(folder: Path) -> str:
    """``eagle``, ``eagle3`` or ``draft`` from the folder's tensor names; a clear error for anything else."""
    weights = _weights(folder)
    with safe_open(weights, "pt") as f:
        names = set(f.keys())
    if any(n.startswith("midlayer.") for n in names):
        return "eagle3"
    if "fc.weight" in names and "layers.0.self_attn.q_proj.weight" in names:
        return "eagle"
    if any(n.startswith("model.layers.") for n in names):
        return "draft"
    raise CheckpointError(f"{weights}: neither an EAGLE head (fc.weight, layers.0.* or midlayer.*) nor a Llama model (model.layers.*)")


def _weights(folder: Path) -> Path:
    path = Path(folder) / "model.safetensors"
    if not path.exists():
        raise CheckpointError(f"{folder}: no model.safetensors (export reads safetensors only)")
    return path


def _fold_fc_bias(tensors: dict[str, torch.Tensor]) -> tuple[dict, dict, list[str]]:
    """fc(x) + b == fc_nobias(x) with q/k/v biases W·b and an o_proj bias b (the residual carries b): (tensors, config
    changes, what changed)."""
    out = {k: v for k, v in tensors.items() if k != "fc.bias"}
    changes = []
    if "fc.bias" in tensors:
        b = tensors["fc.bias"].float()
        p = "layers.0.self_attn."
        for x in "qkv":
            w = tensors[p + f"{x}_proj.weight"]
            out[p + f"{x}_proj.bias"] = (w.float() @ b).to(w.dtype)
        out[p + "o_proj.bias"] = tensors["fc.bias"].clone()
        changes.append("fc.bias folded into q/k/v biases (W·b) and an o_proj bias (b): vLLM's fc has no bias")
    config = {"bias": False, "attention_bias": "fc.bias" in tensors, "num_hidden_layers": 1}
    changes.append("config: bias=false (vLLM reads it as attention biases)")
    return out, config, changes


def convert(tensors: dict, config: dict, layout: Layout) -> tuple[dict, dict, list[str]]:
    """A head's tensors and config in ``layout`` (its architecture, its fc bias folded where the engine has none)."""
    changes: list[str] = []
    if layout.fold_fc_bias:
        tensors, changed, changes = _fold_fc_bias(tensors)
        config = config | changed
    changes.append(f"config: architectures={layout.architecture}")
    return tensors, config | {"architectures": [layout.architecture]}, changes


@dataclass(frozen=True)
class SpeculatorsFormat:
    """``--format speculators``: the verifier the head drafts for and the chain vLLM drafts."""

    verifier: Path
    tokens: int


def export_drafter(
    source: Path, engine: str, out: Path, draft_vocab_size: int | None = None, speculators: SpeculatorsFormat | None = None
) -> Exported:
    """Write ``source`` (a speculab drafter folder) into ``out`` in ``engine``'s layout, or the speculators format."""
    if engine not in ENGINES:
        raise ValueError(f"--for {engine}: known engines are {', '.join(ENGINES)}")
    source, out = Path(source), Path(out)
    if out.resolve() == source.resolve():
        raise ValueError(f"{out}: export into a new folder, not over the drafter")
    kind = drafter_kind(source)
    if speculators is not None and (engine != "vllm" or kind != "eagle3"):
        if engine != "vllm":
            raise ValueError("--format speculators: a vLLM format (--for vllm)")
        refuse(kind)
    out.mkdir(parents=True, exist_ok=True)
    if speculators is not None:
        changes = write_speculators(source, _weights(source), out, speculators.verifier, speculators.tokens)
    elif (layout := _layout(kind, engine)).architecture is None:
        changes = _copy_clean(source, out)
    else:
        config = json.loads((source / "config.json").read_text())
        tensors, config, changes = convert(load_file(_weights(source)), config, layout)
        save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors", metadata={"format": "pt"})
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    token_map = _token_map(source, out, kind, engine, draft_vocab_size, changes)
    manifest = {
        "source": str(source),
        "source_sha256": sha256_of(_weights(source)),
        "engine": engine,
        "kind": kind,
        "format": "speculators" if speculators else engine,
        "changes": changes,
        "token_map": token_map.name if token_map else None,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return Exported(out, kind, engine, token_map)


def _layout(kind: str, engine: str) -> Layout:
    on = getattr(method(kind), engine)
    if on is None:
        raise ValueError(f"--for {engine}: it runs no {kind} drafter")
    return on.layout


def _copy_clean(source: Path, out: Path) -> list[str]:
    kept = [n for n in HF_FILES if (source / n).exists()]
    if "config.json" not in kept:
        raise CheckpointError(f"{source}: no config.json")
    for name in [*kept, "model.safetensors"]:
        shutil.copyfile(source / name, out / name)
    left = sorted(p.name for p in source.iterdir() if p.is_file() and p.name not in kept and p.name != "model.safetensors")
    return [f"clean HF folder: left out {', '.join(left)} (engines read every .safetensors as weights)"] if left else []


def _token_map(source: Path, out: Path, kind: str, engine: str, size: int | None, changes: list[str]) -> Path | None:
    """SGLang's token map for a reduced vocabulary, for a kind whose SGLang algorithm takes one; none elsewhere."""
    on = method(kind).sglang
    if size is None or engine != "sglang" or on is None or not on.token_map_from:
        return None
    vocab = json.loads((source / "config.json").read_text())["vocab_size"]
    ids = load_token_ranking(source, vocab)[:size]
    path = out / TOKEN_MAP
    torch.save(ids.clone(), path)
    changes.append(f"{TOKEN_MAP}: the {len(ids)} most frequent tokens, for --speculative-token-map")
    return path
