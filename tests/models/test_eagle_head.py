"""An EAGLE-1/2 head's layer in the C++ loop against the Python layer: the same math, no input RMSNorm."""

import pytest
import torch

from speculab.models.eagle_head import load_eagle_head
from speculab.models.llama import ForwardBatch, causal_batch
from speculab.models.native_layers import NativeLayers
from tests.helpers import speculab_from_hf, tiny_hf_model, write_eagle_head


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    hf = tiny_hf_model("llama", seed=6, bf16_weights=True)
    target = speculab_from_hf(hf)
    head = load_eagle_head(write_eagle_head(tmp_path_factory.mktemp("head"), hf.config, seed=6, bf16_weights=True), target)
    assert isinstance(head.native_layers, NativeLayers), "native kernels not built: run `make setup`"
    return target, head


def head_outputs(target, head, native: bool):
    """Context rows in slots 0 and 1, then a 4-node tree in slot 1: the head's hidden states and its cache."""
    saved = head.native_layers
    head.native_layers = saved if native else None
    try:
        cache = head.new_cache(2, 64)
        g = torch.Generator().manual_seed(0)
        feats = torch.randn(2, 9, target.config.hidden_size, generator=g)
        context = head.hidden(
            target, torch.arange(3, 21).view(2, 9), feats, causal_batch(torch.arange(2), torch.zeros(2, dtype=torch.long), 9), cache
        )
        tree = torch.zeros(1, 1, 4, 13, dtype=torch.bool)
        tree[..., :9] = True
        for i, ancestors in enumerate([[0], [0, 1], [0, 2], [0, 1, 3]]):
            tree[0, 0, i, [9 + a for a in ancestors]] = True
        batch = ForwardBatch(torch.tensor([1]), torch.tensor([[9, 10, 10, 11]]), torch.arange(9, 13)[None], tree)
        nodes = head.hidden(
            target, torch.tensor([[30, 31, 32, 33]]), torch.randn(1, 4, target.config.hidden_size, generator=g), batch, cache
        )
        return context, nodes, cache.kv.clone()
    finally:
        head.native_layers = saved


def test_the_heads_layer_in_cpp_is_close_to_the_python_layer(pair):
    target, head = pair
    for native, python in zip(head_outputs(target, head, True), head_outputs(target, head, False)):
        torch.testing.assert_close(native, python, rtol=1e-5, atol=1e-5)


def test_an_fp32_head_keeps_the_python_layer(tmp_path):
    """Weights that are not bf16 numbers cannot take the native linears, so the head's layer stays in Python."""
    hf = tiny_hf_model("llama", seed=6, bf16_weights=True)
    head = load_eagle_head(write_eagle_head(tmp_path, hf.config, seed=6), speculab_from_hf(hf))
    assert head.native_layers is None
