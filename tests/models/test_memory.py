"""Analytic memory figures, checked against hand-computed values."""

import json
import math

import pytest

from speculab.models.config import CONFIGS, ModelConfig
from speculab.models.memory import (
    KVCapacity,
    drafter_kv_bytes_per_token,
    eagle3_head_tensors,
    eagle_head_parameters,
    estimate,
    kv_bytes_per_token,
    kv_capacity,
    kv_heads_per_device,
    machine_memory_bytes,
    model_tensors,
    model_weights,
)

TINY = ModelConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)
TINY_DRAFT = ModelConfig(
    vocab_size=100, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, tie_word_embeddings=True
)

# Hand-counted TINY: q 64x64, k/v 64x32 each, o 64x64, MLP 3 x 64x128, two norms per layer; embed + lm_head; final norm.
TINY_LAYER_LINEAR = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128  # 36864
TINY_PARAMS = 2 * (TINY_LAYER_LINEAR + 2 * 64) + 2 * 100 * 64 + 64  # 86848


def test_tiny_parameter_and_byte_counts():
    assert model_tensors(TINY).parameters == TINY_PARAMS == 86848
    assert model_weights(TINY, 2).total_bytes == 2 * 86848
    assert model_weights(TINY, 4).total_bytes == 4 * 86848
    # norms (2 per layer + final = 5 x 64) are replicated, the rest splits over ranks
    w = model_weights(TINY, 2)
    assert w.replicated_bytes == 2 * 5 * 64
    assert w.per_device_bytes(2) == (2 * 86848 - 2 * 320) // 2 + 2 * 320


def test_tiny_awq_bytes_by_hand():
    # per matrix (in, out): in*out/2 (int4) + ceil(in/128)*out*2.5 (fp16 scale + int4 zero); here in <= 128: one group
    mats = [(64, 64), (64, 32), (64, 32), (64, 64), (64, 128), (64, 128), (128, 64)]
    per_layer = sum(i * o // 2 + math.ceil(i / 128) * o * 2.5 for i, o in mats)
    fp16 = 2 * (2 * 100 * 64 + 5 * 64)  # embed, lm_head, norms stay fp16
    assert model_weights(TINY, "awq").total_bytes == 2 * per_layer + fp16
    assert model_weights(TINY, "awq").weight_format == "awq-int4-g128"
    with pytest.raises(ValueError):
        model_weights(TINY, "gptq")


def test_kv_bytes_per_token_by_hand():
    assert kv_bytes_per_token(TINY, 2) == 2 * 2 * 2 * 16 * 2 == 256
    assert kv_bytes_per_token(TINY, 2, num_layers=1) == 128
    assert kv_bytes_per_token(TINY, 2, tensor_parallel=2) == 128  # one KV head per rank
    assert kv_heads_per_device(2, 4) == 1  # more ranks than heads: replicated, one each
    assert kv_heads_per_device(8, 4) == 2


def test_drafter_kv_draft_model_all_layers_eagle_one_layer():
    assert drafter_kv_bytes_per_token(None, TINY, None, 2) == 0
    assert drafter_kv_bytes_per_token("draft", TINY, TINY_DRAFT, 2) == 2 * 1 * 1 * 16 * 2
    assert drafter_kv_bytes_per_token("eagle", TINY, None, 2) == 2 * 1 * 2 * 16 * 2  # one layer, target's heads
    with pytest.raises(ValueError):
        drafter_kv_bytes_per_token("draft", TINY, None, 2)
    with pytest.raises(ValueError):
        drafter_kv_bytes_per_token("medusa", TINY, None, 2)


def test_eagle_head_parameters_by_hand():
    fc = 2 * 64 * 64 + 64
    layer = TINY_LAYER_LINEAR + 64  # no input_layernorm
    assert eagle_head_parameters(TINY) == fc + layer
    assert eagle_head_parameters(TINY, fc_bias=False) == fc + layer - 64
    assert eagle_head_parameters(TINY, own_embedding=True) == fc + layer + 100 * 64
    # EAGLE-3: fc 3H->H, q/k/v on 2H inputs, four norms, own lm_head over the draft vocab
    e3 = eagle3_head_tensors(TINY, draft_vocab_size=10)
    attn = 128 * 64 + 2 * 128 * 32 + 64 * 64
    assert e3.parameters == 3 * 64 * 64 + attn + 3 * 64 * 128 + 4 * 64 + 10 * 64


def test_kv_capacity():
    assert kv_capacity(1000, 200, 10, overhead_bytes=100) == KVCapacity(700, 70, 0)
    cap = kv_capacity(10 * 32768 * 4 + 50, 0, 4)
    assert cap.tokens == 10 * 32768 + 12 and cap.sessions == 10
    assert kv_capacity(100, 200, 10) == KVCapacity(0, 0, 0)
    with pytest.raises(ValueError):
        kv_capacity(100, 0, 0)


def test_estimate_tiny_is_consistent_and_json():
    memory = 10_000_000
    base = estimate(TINY, None, None, 2, memory)
    draft = estimate(TINY, "draft", TINY_DRAFT, 2, memory)
    eagle = estimate(TINY, "eagle", None, 2, memory, memory_utilization=0.5, overhead_bytes=1000)
    json.dumps([base, draft, eagle])
    assert base["kv_capacity_tokens"] == (memory - 2 * 86848) // 256
    assert draft["drafter_weights_bytes"] == 2 * model_tensors(TINY_DRAFT).parameters
    # a reduced draft vocabulary keeps its own copy of that many lm_head rows (hidden 32)
    reduced = estimate(TINY, "draft", TINY_DRAFT, 2, memory, draft_vocab_size=40)
    assert reduced["drafter_weights_bytes"] == 2 * (model_tensors(TINY_DRAFT).parameters + 40 * 32)
    assert draft["kv_bytes_per_token_per_device"] == 256 + 64
    assert draft["kv_capacity_tokens"] == (memory - 2 * 86848 - 2 * model_tensors(TINY_DRAFT).parameters) // 320
    assert eagle["drafter_weights_bytes"] == 2 * eagle_head_parameters(TINY)
    assert eagle["kv_capacity_tokens"] == (memory // 2 - 1000 - 2 * 86848 - eagle["drafter_weights_bytes"]) // (256 + 128)
    with pytest.raises(ValueError):
        estimate(TINY, "draft", TINY_DRAFT, 2, memory, 2, drafter_tensor_parallel=4)


def test_named_configs_match_the_published_ones():
    big, small = CONFIGS["llama-3.3-70b"], CONFIGS["llama-3.2-1b"]
    assert (big.hidden_size, big.num_layers, big.num_heads, big.num_kv_heads, big.head_dim) == (8192, 80, 64, 8, 128)
    assert (big.intermediate_size, big.vocab_size, big.tie_word_embeddings) == (28672, 128256, False)
    assert (small.hidden_size, small.num_layers, small.num_heads, small.num_kv_heads, small.head_dim) == (2048, 16, 32, 8, 64)
    assert (small.intermediate_size, small.vocab_size, small.tie_word_embeddings) == (8192, 128256, True)


def test_70b_figures():
    big, small = CONFIGS["llama-3.3-70b"], CONFIGS["llama-3.2-1b"]
    assert kv_bytes_per_token(big, 2) == 2 * 80 * 8 * 128 * 2 == 327680
    assert kv_bytes_per_token(big, 2, tensor_parallel=4) == 327680 // 4
    assert drafter_kv_bytes_per_token("draft", big, small, 2) == 16 * 2 * 8 * 64 * 2 == 32768
    assert drafter_kv_bytes_per_token("eagle", big, None, 2) == 2 * 8 * 128 * 2 == 4096
    # ERRATA: the 70B EAGLE head is about 1B parameters, about 2 GB in fp16 (not 680 MB)
    head = eagle_head_parameters(big)
    assert head == 2 * 8192 * 8192 + 8192 + (8192 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 8192
    assert 0.98e9 < head < 1.0e9
    assert model_weights(small, 2).total_bytes == 2 * 1_235_814_400
    awq = model_weights(big, "awq").total_bytes
    assert 39e9 < awq < 40.5e9  # published AWQ checkpoints of Llama-3.3-70B are about 40 GB
    e = estimate(big, "eagle", None, 2, 24 * 2**30, 4, target_weight_format="awq")
    # fc (2H x H + bias) is replicated on every rank, the decoder layer is split four ways
    fc = 2 * (2 * 8192 * 8192 + 8192)
    assert e["drafter_weights_bytes_per_device"] == fc + math.ceil((2 * head - fc - 2 * 8192) / 4) + 2 * 8192


def test_machine_memory_bytes_is_plausible():
    assert machine_memory_bytes() > 2**28
