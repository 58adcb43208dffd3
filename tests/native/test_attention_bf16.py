"""The native attention over a bf16 KV cache: the tiles' kernel where the CPU has AMX (attention_amx.cpp), else the
fp32 kernels on the widened cache; either way each row alone, and the float64 result to fp32's accuracy."""

import pytest
import torch
import torch.nn.functional as F

from speculab import native
from tests.native.test_attention import NEG, case


@pytest.fixture(scope="module", params=[True, False], ids=["tiles-where-present", "widened"])
def kernels(request):
    """The kernels with the AMX attention on (where the CPU has AMX) and off (``use_amx(False)``: widened to fp32)."""
    module = native.kernels()
    assert module is not None, f"native kernels not built ({native.disabled_reason() or native.build_dir()}): run `make setup`"
    before = module.use_amx(request.param)
    yield module
    module.use_amx(before)


def bf16_case(batch, rows, length, head_dim=64, seed=0):
    query, keys, values, mask = case(batch, rows, length, head_dim=head_dim, seed=seed)
    cache = torch.cat([keys, values], 1).to(torch.bfloat16)  # a cache-shaped view again: keys and values strided
    heads = keys.shape[1]
    return query, cache[:, :heads], cache[:, heads:], mask


def exact(query, keys, values, mask):
    """The float64 attention of the bf16 keys and values."""
    return F.scaled_dot_product_attention(query.double(), keys.double(), values.double(), attn_mask=mask.double()).float()


@pytest.mark.parametrize("batch,rows,length", [(1, 3, 7), (1, 3, 1201), (2, 12, 300), (4, 24, 513), (1, 1, 256), (3, 5, 257), (1, 48, 90)])
def test_matches_the_float64_attention_of_the_bf16_cache(kernels, batch, rows, length):
    query, keys, values, mask = bf16_case(batch, rows, length)
    got = kernels.cached_attention(query, keys, values, mask)
    torch.testing.assert_close(got, exact(query, keys, values, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])  # 16: not a multiple of 32, so widened even with AMX
def test_head_dims(kernels, head_dim):
    query, keys, values, mask = bf16_case(2, 6, 100, head_dim=head_dim)
    torch.testing.assert_close(kernels.cached_attention(query, keys, values, mask), exact(query, keys, values, mask), rtol=1e-5, atol=1e-6)


def test_a_row_does_not_depend_on_the_other_rows_or_on_masked_keys_after_it(kernels):
    """What makes a verify forward give exactly the decode forward's result, row by row, on a bf16 cache too."""
    query, keys, values, mask = bf16_case(2, 9, 700)
    together = kernels.cached_attention(query, keys, values, mask)
    alone = torch.cat([kernels.cached_attention(query[:, :, r : r + 1], keys, values, mask[:, :, r : r + 1]) for r in range(9)], 2)
    assert torch.equal(alone, together)
    assert torch.equal(kernels.cached_attention(query[:1], keys[:1], values[:1], mask[:1]), together[:1])  # nor on the batch
    cache = torch.cat([keys, values], 1)
    longer = torch.cat([cache, torch.randn(2, 6, 40, 64).to(torch.bfloat16)], 2)  # 40 more positions, all masked
    longer_mask = torch.cat([mask, torch.full((2, 1, 9, 40), NEG)], -1)
    assert torch.equal(kernels.cached_attention(query, longer[:, :3], longer[:, 3:], longer_mask), together)


def test_a_row_whose_whole_chunk_is_masked(kernels):
    query, keys, values, mask = bf16_case(1, 2, 600)
    mask[0, 0, 0, :256] = NEG  # the first 256-key chunk hidden from row 0
    torch.testing.assert_close(kernels.cached_attention(query, keys, values, mask), exact(query, keys, values, mask), rtol=1e-5, atol=1e-6)


def test_keys_and_values_of_different_dtypes_are_a_clear_error(kernels):
    query, keys, values, mask = bf16_case(1, 3, 40)
    with pytest.raises(RuntimeError, match="both float32 or both bfloat16"):
        kernels.cached_attention(query, keys, values.float(), mask)


def test_the_tiles_run_where_the_cpu_has_amx():
    """The switch is honest: with AMX in use the tiles' result differs (in rounding) from the widened fp32 kernels'."""
    module = native.kernels()
    before = module.use_amx(True)
    try:
        if not module.amx_in_use():
            pytest.skip("this CPU has no AMX: only the widened path runs here")
        query, keys, values, mask = bf16_case(1, 12, 1200)
        tiles = module.cached_attention(query, keys, values, mask)
        assert module.attention_amx_available(64) and not module.attention_amx_available(16)
        module.use_amx(False)
        widened = module.cached_attention(query, keys, values, mask)
    finally:
        module.use_amx(before)
    assert not torch.equal(tiles, widened)
    torch.testing.assert_close(tiles, widened, rtol=1e-5, atol=1e-6)
