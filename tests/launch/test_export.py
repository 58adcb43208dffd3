"""`speculab export`: drafters in vLLM's and SGLang's layouts and the speculators format; the fc-bias fold is exact."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from speculab.launch.export import MANIFEST, TOKEN_MAP, SpeculatorsFormat, drafter_kind, export_drafter
from speculab.models.draft_vocab import save_ranking
from speculab.models.eagle3_head import eagle3_feature_layers
from speculab.models.eagle_head import load_eagle_head
from speculab.models.llama import causal_batch
from speculab.models.loading import CheckpointError
from tests.helpers import save_tiny_checkpoint, speculab_from_hf, tiny_hf_model, write_eagle3_head, write_eagle_head


def _vllm_view(head, exported: dict) -> nn.Module:
    """The head as vLLM's EagleLlamaForCausalLM computes it from the export: fc without bias, q/k/v/o with biases."""
    view = copy.deepcopy(head)
    view.fc = nn.Linear(view.fc.in_features, view.fc.out_features, bias=False)
    view.fc.weight.data = exported["fc.weight"].clone()
    attn = view.layer.self_attn
    qkv = nn.Linear(attn.qkv_proj.in_features, attn.qkv_proj.out_features, bias=True)
    qkv.weight.data = attn.qkv_proj.weight.data.clone()
    qkv.bias.data = torch.cat([exported[f"layers.0.self_attn.{x}_proj.bias"] for x in "qkv"])
    o = nn.Linear(attn.o_proj.in_features, attn.o_proj.out_features, bias=True)
    o.weight.data = attn.o_proj.weight.data.clone()
    o.bias.data = exported["layers.0.self_attn.o_proj.bias"].clone()
    attn.qkv_proj, attn.o_proj = qkv, o
    return view


def test_vllm_eagle_export_folds_the_fc_bias_exactly(tmp_path):
    hf = tiny_hf_model()
    target = speculab_from_hf(hf, prepack=False)
    source = write_eagle_head(tmp_path / "head", hf.config, bias=True)
    exported = export_drafter(source, "vllm", tmp_path / "vllm")
    tensors = load_file(exported.folder / "model.safetensors")
    config = json.loads((exported.folder / "config.json").read_text())
    assert "fc.bias" not in tensors and config["bias"] is False and config["attention_bias"] is True
    assert config["architectures"] == ["EagleLlamaForCausalLM"]

    head = load_eagle_head(source, target, torch.float32, prepack=False)
    view = _vllm_view(head, tensors)
    assert head.fc.bias.abs().sum() > 0  # the fold has something to carry
    tokens = torch.randint(3, hf.config.vocab_size, (1, 7))
    features = torch.randn(1, 7, hf.config.hidden_size)
    outputs = []
    for module in (head, view):
        cache = module.new_cache(1, 16)
        batch = causal_batch(torch.tensor([0]), torch.tensor([0]), 7)
        outputs.append(module.hidden(target, tokens, features, batch, cache))
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-5, atol=1e-5)
    manifest = json.loads((exported.folder / MANIFEST).read_text())
    assert manifest["kind"] == "eagle" and manifest["engine"] == "vllm" and any("folded" in c for c in manifest["changes"])


def test_sglang_eagle_export_keeps_the_head_and_writes_the_token_map(tmp_path):
    hf = tiny_hf_model()
    source = write_eagle_head(tmp_path / "head", hf.config, bias=True)
    ranking = torch.randperm(hf.config.vocab_size)
    save_ranking(source, ranking, torch.arange(hf.config.vocab_size, 0, -1))
    exported = export_drafter(source, "sglang", tmp_path / "sglang", draft_vocab_size=32)
    assert load_file(exported.folder / "model.safetensors").keys() == load_file(source / "model.safetensors").keys()
    assert json.loads((exported.folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle"]
    assert exported.token_map == exported.folder / TOKEN_MAP
    assert torch.equal(torch.load(exported.token_map, weights_only=True), ranking[:32])
    assert not (exported.folder / "draft_vocab.safetensors").exists()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_eagle3_export_is_the_published_layout(tmp_path, engine):
    hf = tiny_hf_model()
    source = write_eagle3_head(tmp_path / "head3", hf.config)
    exported = export_drafter(source, engine, tmp_path / engine)
    assert exported.kind == "eagle3"
    before, after = load_file(source / "model.safetensors"), load_file(exported.folder / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert json.loads((exported.folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]


def test_draft_export_is_a_clean_hf_folder(tmp_path):
    source = save_tiny_checkpoint(tmp_path / "draft")
    save_ranking(source, torch.arange(256), torch.arange(256, 0, -1))  # draft_vocab.safetensors: vLLM would read it as weights
    (source / "train_log.jsonl").write_text("{}\n")
    exported = export_drafter(source, "vllm", tmp_path / "out")
    names = {p.name for p in exported.folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not {n for n in names if n.endswith(".safetensors")} - {"model.safetensors"}
    assert "train_log.jsonl" not in names
    assert drafter_kind(exported.folder) == "draft"


def test_export_refuses_what_it_cannot_read(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        export_drafter(tmp_path / "empty", "vllm", tmp_path / "out")
    hf = tiny_hf_model()
    source = write_eagle_head(tmp_path / "head", hf.config)
    with pytest.raises(ValueError, match="known engines"):
        export_drafter(source, "tgi", tmp_path / "out")
    with pytest.raises(ValueError, match="new folder"):
        export_drafter(source, "vllm", source)


def test_eagle3_in_the_speculators_format(tmp_path):
    """What vLLM's speculators reader needs (its real parser and server: test_vllm_speculators_suffix.py)."""
    hf = tiny_hf_model()
    source = write_eagle3_head(tmp_path / "head3", hf.config)
    target = save_tiny_checkpoint(tmp_path / "target")
    exported = export_drafter(source, "vllm", tmp_path / "out", speculators=SpeculatorsFormat(target, 5))
    config = json.loads((exported.folder / "config.json").read_text())
    assert "model_type" not in config  # vLLM reads a folder as speculators only without one
    assert config["speculators_model_type"] == "eagle3" and config["norm_before_residual"] is False
    proposal = config["speculators_config"]["proposal_methods"][0]
    assert (proposal["proposal_type"], proposal["speculative_tokens"]) == ("greedy", 5)
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(target.resolve())
    layers = json.loads((target / "config.json").read_text())["num_hidden_layers"]
    assert config["eagle_aux_hidden_state_layer_ids"] == list(eagle3_feature_layers(layers))
    assert config["transformer_layer_config"]["num_hidden_layers"] == 1
    before, after = load_file(source / "model.safetensors"), load_file(exported.folder / "model.safetensors")
    assert {k.replace("midlayer.", "layers.0.") for k in before} == set(after)
    assert all(torch.equal(v, after[k.replace("midlayer.", "layers.0.")]) for k, v in before.items())
    assert json.loads((exported.folder / MANIFEST).read_text())["format"] == "speculators"


def test_the_speculators_format_refuses_what_vllm_cannot_load(tmp_path):
    hf = tiny_hf_model()
    target = save_tiny_checkpoint(tmp_path / "target")
    speculators = SpeculatorsFormat(target, 3)
    with pytest.raises(ValueError, match="no speculators type"):
        export_drafter(write_eagle_head(tmp_path / "head", hf.config), "vllm", tmp_path / "a", speculators=speculators)
    with pytest.raises(ValueError, match="draft model has no speculators type"):
        export_drafter(save_tiny_checkpoint(tmp_path / "draft"), "vllm", tmp_path / "b", speculators=speculators)
    head3 = write_eagle3_head(tmp_path / "head3", hf.config)
    with pytest.raises(ValueError, match="--for vllm"):
        export_drafter(head3, "sglang", tmp_path / "c", speculators=speculators)
    with pytest.raises(CheckpointError, match="no config.json"):
        export_drafter(head3, "vllm", tmp_path / "d", speculators=SpeculatorsFormat(tmp_path / "nowhere", 3))
