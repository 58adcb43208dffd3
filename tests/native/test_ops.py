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
