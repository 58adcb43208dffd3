"""Loading local HF checkpoint folders, and the errors for bad ones."""

import json

import pytest
import torch

from speculab.models.config import ModelConfig, UnsupportedModelError
from speculab.models.llama import causal_batch
from speculab.models.loading import CheckpointError, load_model
from tests.helpers import save_tiny_checkpoint, tiny_hf_model


def logits_of(model, tokens):
    cache = model.new_cache(1, 32)
    return model(tokens, causal_batch(torch.arange(1), torch.zeros(1, dtype=torch.long), tokens.shape[1]), cache).logits


@pytest.mark.parametrize("safe,shard", [(True, None), (True, "60KB"), (False, None), (False, "60KB")])
def test_loads_single_and_sharded_checkpoints(tmp_path, safe, shard):
    save_tiny_checkpoint(tmp_path, safe=safe, shard=shard)
    if shard:
        index = "model.safetensors.index.json" if safe else "pytorch_model.bin.index.json"
        assert (tmp_path / index).exists()
    model = load_model(tmp_path)
    tokens = torch.randint(0, 256, (1, 8))
    ref = tiny_hf_model("llama")(tokens).logits
    torch.testing.assert_close(logits_of(model, tokens), ref, atol=1e-5, rtol=1e-5)


def test_missing_shard_is_named(tmp_path):
    save_tiny_checkpoint(tmp_path, shard="60KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    shards[-1].unlink()
    with pytest.raises(CheckpointError, match=shards[-1].name):
        load_model(tmp_path)


def test_wrong_shape_names_file_and_tensor(tmp_path):
    save_tiny_checkpoint(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["intermediate_size"] = 96
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.\w+_proj\.weight' has shape"):
        load_model(tmp_path)


def test_missing_tensor_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    save_tiny_checkpoint(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_model(tmp_path)


def test_unsupported_architecture(tmp_path):
    save_tiny_checkpoint(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["model_type"], config["architectures"] = "gpt2", ["GPT2LMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="gpt2"):
        load_model(tmp_path)


def test_missing_weights_and_config(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint folder"):
        load_model(tmp_path / "nope")
    tmp_path.joinpath("config.json").write_text(json.dumps(tiny_hf_model().config.to_dict()))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_model(tmp_path)


def test_safetensors_preferred_over_bin(tmp_path):
    save_tiny_checkpoint(tmp_path, safe=True, seed=3)
    other = tmp_path / "other"
    save_tiny_checkpoint(other, safe=False, seed=4)  # a loadable pickle with other weights: reading it would change the logits
    (other / "pytorch_model.bin").rename(tmp_path / "pytorch_model.bin")
    tokens = torch.tensor([[5, 9, 2, 7]])
    reference = tiny_hf_model(seed=3).eval()
    with torch.no_grad():
        expected = reference(tokens).logits
        assert not torch.allclose(tiny_hf_model(seed=4).eval()(tokens).logits, expected)  # the two checkpoints differ
        assert torch.allclose(logits_of(load_model(tmp_path, torch.float32), tokens), expected, atol=1e-5)


def test_config_reads_both_rope_spellings():
    legacy = ModelConfig.from_hf_dict(
        {
            **tiny_hf_model().config.to_dict(),
            "rope_parameters": None,
            "rope_theta": 5e5,
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "original_max_position_embeddings": 8192},
        }
    )
    assert legacy.rope_theta == 5e5 and legacy.rope_scaling.kind == "llama3" and legacy.rope_scaling.factor == 32.0
    with pytest.raises(UnsupportedModelError, match="yarn"):
        ModelConfig.from_hf_dict({**tiny_hf_model().config.to_dict(), "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})


def test_bf16_checkpoint_loads_in_fp32_and_bf16(tmp_path):
    hf = tiny_hf_model().to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    for dtype in (torch.float32, torch.bfloat16):
        model = load_model(tmp_path, dtype)
        assert model.dtype == dtype
        assert torch.isfinite(logits_of(model, torch.randint(0, 256, (1, 5))).float()).all()
