"""The layer's small native ops against their ATen definitions."""

import pytest
import torch
import torch.nn.functional as F

from speculab import native
from speculab.models.config import RopeScaling
from speculab.models.llama import rope_inv_freq, rope_tables


@pytest.fixture(scope="module")
def kernels():
    module = native.kernels()
    assert module is not None, f"native kernels not built ({native.disabled_reason() or native.build_dir()}): run `make setup`"
    return module


@pytest.mark.parametrize("scaled", [True, False])
def test_rms_norm_rows(kernels, scaled):
    x = torch.randn(7, 96) * 3
    weight = torch.randn(96) if scaled else torch.empty(0)
    expected = F.rms_norm(x, (96,), weight if scaled else None, 1e-5)
    torch.testing.assert_close(kernels.rms_norm_rows(x, weight, 1e-5), expected, rtol=1e-5, atol=1e-6)


def test_silu_mul(kernels):
    gate_up = torch.randn(2, 5, 64) * 4
    gate_up[0, 0, :8] = torch.tensor([-100.0, -88.0, -20.0, 0.0, 20.0, 88.0, 100.0, 1e-8])  # the tails of exp
    gate, up = gate_up.chunk(2, -1)
    torch.testing.assert_close(kernels.silu_mul(gate_up), F.silu(gate) * up, rtol=2e-6, atol=1e-6)


def test_rope_and_write_matches_the_python_attention_prologue(kernels):
    """Rotated queries in grouped-query order; rotated keys and values written at each row's slot and positions."""
    bsz, q, heads, kv_heads, d = 2, 3, 6, 2, 32
    qkv = torch.randn(bsz, q, (heads + 2 * kv_heads) * d)
    positions = torch.tensor([[5, 6, 6], [9, 10, 11]])  # a tree's depths repeat positions
    cos, sin = rope_tables(positions, rope_inv_freq(d, 10000.0, RopeScaling()), torch.float32)
    cache = torch.zeros(4, 2 * kv_heads, 16, d)
    rows, cache_pos = torch.tensor([3, 1]), torch.tensor([[5, 6, 7], [9, 10, 11]])
    query = kernels.rope_and_write(qkv, cos, sin, cache, rows, cache_pos, heads, kv_heads, d)
    # the Python loop's way (models/llama.py, Attention.forward)
    heads_qkv = qkv.view(bsz, q, heads + 2 * kv_heads, d).transpose(1, 2)
    qk = heads_qkv[:, : heads + kv_heads]
    qk = torch.addcmul(qk * cos, qk.roll(d // 2, dims=-1), sin)
    expected_cache = torch.zeros_like(cache)
    new_kv = torch.cat((qk[:, heads:], heads_qkv[:, heads + kv_heads :]), dim=1)
    expected_cache.index_put_((rows[:, None, None], torch.arange(2 * kv_heads)[None, :, None], cache_pos[:, None, :]), new_kv)
    torch.testing.assert_close(query, qk[:, :heads].reshape(bsz, kv_heads, (heads // kv_heads) * q, d), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(cache, expected_cache, rtol=1e-6, atol=1e-6)


def test_linear_adds_the_residual_in_its_store(kernels):
    w = torch.randn(40, 24).to(torch.bfloat16)
    x, residual = torch.randn(9, 24), torch.randn(9, 40)
    packed = kernels.pack(w)
    for rows in (1, 4, 9):  # the one-row, few-row and packed-rows kernels
        got = kernels.linear(x[:rows], packed, 40, None, residual[:rows])
        assert torch.equal(got, residual[:rows] + kernels.linear(x[:rows], packed, 40, None))
    with pytest.raises(RuntimeError, match="bias and a residual"):
        kernels.linear(x, packed, 40, torch.zeros(40), residual)


def test_rope_and_write_rounds_into_a_bf16_cache_as_torch_does(kernels):
    """A bf16 cache receives what the fp32 cache would, rounded as ``.to(torch.bfloat16)`` rounds: to nearest, ties to
    even, NaN kept NaN, infinities and signed zeros kept (the values' part is written unrotated, so it carries them)."""
    bsz, q, heads, kv_heads, d = 2, 3, 4, 2, 32
    qkv = torch.randn(bsz, q, (heads + 2 * kv_heads) * d)
    special = torch.tensor(
        [
            1 + 2**-8,
            1 + 3 * 2**-8,
            -(1 + 2**-8),
            float("nan"),
            float("inf"),
            float("-inf"),
            -0.0,
            1e-40,
            3.0e38,
            2**-126 * 1.5,
            65504.0,
            1 + 2**-9,
        ]
    )
    values = qkv[..., (heads + kv_heads) * d :].reshape(-1)
    values[: special.numel()] = special
    qkv[..., (heads + kv_heads) * d :] = values.view(bsz, q, kv_heads * d)
    positions = torch.tensor([[5, 6, 7], [9, 10, 11]])
    cos, sin = rope_tables(positions, rope_inv_freq(d, 10000.0, RopeScaling()), torch.float32)
    rows, cache_pos = torch.tensor([1, 0]), positions
    wide, narrow = torch.zeros(2, 2 * kv_heads, 16, d), torch.zeros(2, 2 * kv_heads, 16, d, dtype=torch.bfloat16)
    kernels.rope_and_write(qkv, cos, sin, wide, rows, cache_pos, heads, kv_heads, d)
    query = kernels.rope_and_write(qkv, cos, sin, narrow, rows, cache_pos, heads, kv_heads, d)
    expected = wide.to(torch.bfloat16)
    assert torch.equal(narrow.view(torch.int16)[~expected.isnan()], expected.view(torch.int16)[~expected.isnan()])
    assert torch.equal(narrow.isnan(), expected.isnan()) and expected.isnan().sum() == 1
    torch.testing.assert_close(query, kernels.rope_and_write(qkv, cos, sin, wide.clone(), rows, cache_pos, heads, kv_heads, d))
