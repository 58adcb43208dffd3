"""Rollback and compaction of the static cache."""

import pytest
import torch

from speculab.models.kv_cache import KVCache
from speculab.models.llama import ForwardBatch, causal_batch
from speculab.models.memory import kv_bytes_per_token, model_tensors
from tests.helpers import tiny_model


def run_chain(model, cache, slot, tokens, start):
    q = tokens.shape[1]
    out = model(tokens, causal_batch(torch.tensor([slot]), torch.tensor([start]), q), cache)
    cache.commit(slot, start + q)
    return out.logits[0, -1]


def fresh_last_logits(model, tokens):
    cache = model.new_cache(1, 64)
    return run_chain(model, cache, 0, tokens, 0)


def test_rollback_then_decode_equals_fresh_run():
    model = tiny_model()
    tokens = torch.randint(0, 256, (1, 12))
    cache = model.new_cache(2, 64)
    run_chain(model, cache, 1, tokens, 0)
    cache.keep_prefix(1, 7)  # drop 5 rejected positions
    assert cache.lengths[1] == 7
    other = torch.randint(0, 256, (1, 1))
    got = run_chain(model, cache, 1, other, 7)
    torch.testing.assert_close(got, fresh_last_logits(model, torch.cat([tokens[:, :7], other], 1)), atol=1e-5, rtol=1e-5)


def test_keep_prefix_rejects_growth():
    cache = KVCache(1, 1, 1, 4, 8)
    cache.commit(0, 3)
    with pytest.raises(ValueError):
        cache.keep_prefix(0, 4)


def test_compact_accepted_tree_path_then_decode_equals_fresh_run():
    model = tiny_model()
    context = torch.randint(0, 256, (1, 5))
    cache = model.new_cache(1, 64)
    run_chain(model, cache, 0, context, 0)
    # Four tree nodes written after the context: 0 root, 1 and 2 children of 0, 3 child of 2.
    parents, depth = [-1, 0, 0, 2], [0, 1, 1, 2]
    nodes = torch.randint(0, 256, (1, 4))
    tree = torch.eye(4, dtype=torch.bool)
    for i, p in enumerate(parents):
        while p >= 0:
            tree[i, p] = True
            p = parents[p]
    mask = torch.cat([torch.ones(4, 5, dtype=torch.bool), tree], 1)[None, None]
    batch = ForwardBatch(torch.arange(1), torch.tensor([depth]) + 5, torch.arange(5, 9)[None], mask, slice(0, 1))
    model(nodes, batch, cache)
    path = torch.tensor([0, 2, 3])  # accepted nodes, in order
    cache.compact(0, path + 5, 5)
    assert cache.lengths[0] == 8
    nxt = torch.randint(0, 256, (1, 1))
    got = run_chain(model, cache, 0, nxt, 8)
    want = fresh_last_logits(model, torch.cat([context, nodes[:, path], nxt], 1))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_move_slot_keeps_its_contents():
    model = tiny_model()
    tokens = torch.randint(0, 256, (1, 6))
    cache = model.new_cache(3, 32)
    run_chain(model, cache, 2, tokens, 0)
    cache.move(2, 0)
    assert cache.lengths == [6, 0, 0]
    nxt = torch.randint(0, 256, (1, 1))
    torch.testing.assert_close(
        run_chain(model, cache, 0, nxt, 6), fresh_last_logits(model, torch.cat([tokens, nxt], 1)), atol=1e-5, rtol=1e-5
    )


def test_analytic_config_figures_match_real_tensors():
    """ModelConfig's analytic parameter count and KV bytes/token agree with built models and caches."""
    from speculab.models.config import CONFIGS
    from tests.helpers import tiny_hf_model

    for tie in (True, False):
        hf = tiny_hf_model("llama", tie_word_embeddings=tie)
        model = tiny_model(tie_word_embeddings=tie)
        assert model_tensors(model.config).parameters == hf.num_parameters()
    smol = CONFIGS["smollm2-135m"]
    assert round(model_tensors(smol).parameters / 1e6, 1) == 134.5  # the published size of SmolLM2-135M
    cache = KVCache(smol.num_layers, 1, smol.num_kv_heads, smol.head_dim, 4, torch.bfloat16)
    assert kv_bytes_per_token(smol, 2) == cache.kv.nbytes // 4 == 23040  # the formula is the real cache's size per token
