"""Our forward against the transformers implementation, and the tree/ragged mask contract."""

import pytest
import torch

from speculab.models.linear import NativeLinear
from speculab.models.llama import ForwardBatch, causal_batch
from tests.helpers import speculab_from_hf, tiny_hf_model

# plain nn.Linear; oneDNN-packed fp32; the native bf16-weight kernel (bf16-number weights, as in a bf16 checkpoint)
LINEARS = ("plain", "pytorch", "native")


def model_on(linears: str, kind: str = "llama", **overrides):
    hf = tiny_hf_model(kind, bf16_weights=linears == "native", **overrides)
    ours = speculab_from_hf(hf, prepack=linears != "plain")
    assert isinstance(ours.layers[0].mlp.down_proj, NativeLinear) == (linears == "native"), "native kernels not built: run `make setup`"
    return hf, ours


def prefill(model, tokens):
    bsz, q = tokens.shape
    cache = model.new_cache(bsz, 64)
    return model(tokens, causal_batch(torch.arange(bsz), torch.zeros(bsz, dtype=torch.long), q), cache), cache


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
@pytest.mark.parametrize("linears", LINEARS)
def test_logits_match_transformers(kind, linears):
    hf, ours = model_on(linears, kind, tie_word_embeddings=(kind == "llama"))
    tokens = torch.randint(0, 256, (2, 13))
    ref = hf(tokens).logits
    out, _ = prefill(ours, tokens)
    torch.testing.assert_close(out.logits, ref, atol=1e-5, rtol=1e-5)


def test_llama3_rope_scaling_matches_transformers():
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    hf = tiny_hf_model("llama", rope_scaling=scaling, rope_theta=500000.0)
    ours = speculab_from_hf(hf)
    assert ours.config.rope_scaling.kind == "llama3"
    tokens = torch.randint(0, 256, (1, 40))
    out, _ = prefill(ours, tokens)
    torch.testing.assert_close(out.logits, hf(tokens).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("linears", LINEARS[1:])
def test_incremental_decode_equals_prefill_and_hidden_is_final_norm(linears):
    hf, ours = model_on(linears)
    tokens = torch.randint(0, 256, (2, 9))
    full, _ = prefill(ours, tokens)
    cache = ours.new_cache(2, 64)
    steps = []
    for t in range(9):
        steps.append(ours(tokens[:, t : t + 1], causal_batch(torch.arange(2), torch.full((2,), t), 1), cache).logits)
    torch.testing.assert_close(torch.cat(steps, 1), full.logits, atol=1e-5, rtol=1e-5)
    hf_hidden = hf(tokens, output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(full.hidden, hf_hidden, atol=1e-5, rtol=1e-5)


def test_captured_layers_are_the_inputs_of_those_layers():
    hf = tiny_hf_model("llama")
    ours = speculab_from_hf(hf)
    tokens = torch.randint(0, 256, (1, 7))
    cache = ours.new_cache(1, 16)
    out = ours(tokens, causal_batch(torch.arange(1), torch.zeros(1, dtype=torch.long), 7), cache, capture_layers=(0, 2))
    states = hf(tokens, output_hidden_states=True).hidden_states  # states[i] enters layer i
    assert sorted(out.captured) == [0, 2]
    torch.testing.assert_close(out.captured[2], states[2], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("linears", LINEARS[1:])
def test_tree_forward_equals_each_path_alone(linears):
    """A draft tree verified with a tree mask gives every node the logits of its root-to-node path."""
    _, ours = model_on(linears)
    context = torch.randint(0, 256, (1, 6))
    # Tree of 5 nodes: 0 is the root; 1,2 children of 0; 3 child of 1; 4 child of 3.
    parents = [-1, 0, 0, 1, 3]
    nodes = torch.randint(0, 256, (1, 5))
    depth = [0, 1, 1, 2, 3]
    n, ctx = len(parents), context.shape[1]
    tree = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(parents):
        tree[i, i] = True
        while p >= 0:
            tree[i, p] = True
            p = parents[p]
    _, cache = prefill(ours, context)
    mask = torch.zeros(1, 1, n, ctx + n, dtype=torch.bool)
    mask[..., :ctx] = True
    mask[0, 0, :, ctx:] = tree
    slots = torch.arange(ctx, ctx + n)[None]
    batch = ForwardBatch(torch.arange(1), torch.tensor([depth]) + ctx, slots, mask, slice(0, 1))
    tree_logits = ours(nodes, batch, cache).logits
    for i in range(n):
        path = [j for j in range(n) if tree[i, j]]
        alone, _ = prefill(ours, torch.cat([context, nodes[:, path]], 1))
        torch.testing.assert_close(tree_logits[0, i], alone.logits[0, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_embedded_smollm2_matches_transformers():
    from transformers import AutoModelForCausalLM

    from speculab.models.loading import load_model
    from tests.conftest import embedded_model_path

    path = embedded_model_path()
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ours = load_model(path, torch.float32)
    tokens = torch.randint(0, 49152, (1, 48))
    out, _ = prefill(ours, tokens)
    with torch.no_grad():
        ref = hf(tokens).logits
    torch.testing.assert_close(out.logits, ref, atol=2e-4, rtol=2e-4)
    assert torch.equal(out.logits.argmax(-1), ref.argmax(-1))


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("linears", LINEARS)
def test_lm_head_rows_are_the_weight_rows(tied, linears):
    hf, ours = model_on(linears, tie_word_embeddings=tied)
    ids = torch.tensor([0, 17, 255, 3])
    expected = hf.lm_head.weight.detach()[ids]
    assert torch.equal(ours.lm_head_rows(ids), expected)
