"""The native attention of a few rows over the KV cache: SDPA's result, each row on its own."""

import pytest
import torch
import torch.nn.functional as F

from speculab import native

NEG = float("-inf")


@pytest.fixture(scope="module", params=[True, False], ids=["avx512-where-present", "avx2"])
def kernels(request):
    """The kernels, once with the AVX512 attention (where the CPU has AVX512F) and once with the AVX2 one."""
    module = native.kernels()
    assert module is not None, f"native kernels not built ({native.disabled_reason() or native.build_dir()}): run `make setup`"
    before = module.use_avx512(request.param)
    yield module
    module.use_avx512(before)


def case(batch, rows, length, head_dim=64, heads=3, seed=0):
    """Keys/values as views of a cache-shaped tensor (strided, as the model passes them) and a ragged mask."""
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(batch + 1, 2 * heads, length + 16, head_dim, generator=g)
    keys, values = cache[:batch, :heads, :length], cache[:batch, heads:, :length]
    query = torch.randn(batch, heads, rows, head_dim, generator=g)
    mask = torch.zeros(batch, 1, rows, length)
    for b in range(batch):  # each row sees a different prefix, some rows a tree-like hole
        for r in range(rows):
            mask[b, 0, r, length - (b + r) % 5 :] = NEG
            if r % 3 == 1:
                mask[b, 0, r, length // 3 : length // 2] = NEG
    return query, keys, values, mask


@pytest.mark.parametrize("batch,rows,length", [(1, 3, 7), (1, 3, 1201), (2, 12, 300), (4, 24, 513), (1, 1, 256), (3, 5, 257)])
def test_matches_sdpa(kernels, batch, rows, length):
    query, keys, values, mask = case(batch, rows, length)
    got = kernels.cached_attention(query, keys, values, mask)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(query, keys, values, attn_mask=mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("head_dim", [8, 16, 128])
def test_head_dims(kernels, head_dim):
    query, keys, values, mask = case(2, 6, 100, head_dim=head_dim)
    expected = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    torch.testing.assert_close(kernels.cached_attention(query, keys, values, mask), expected, rtol=1e-5, atol=1e-6)


def test_a_row_does_not_depend_on_the_other_rows_or_on_masked_keys_after_it(kernels):
    """What makes a verify forward give exactly the decode forward's result, row by row."""
    query, keys, values, mask = case(2, 9, 700)
    together = kernels.cached_attention(query, keys, values, mask)
    alone = torch.cat([kernels.cached_attention(query[:, :, r : r + 1], keys, values, mask[:, :, r : r + 1]) for r in range(9)], 2)
    assert torch.equal(alone, together)
    first = kernels.cached_attention(query[:1], keys[:1], values[:1], mask[:1])
    assert torch.equal(first, together[:1])  # nor on the batch
    cache = torch.cat([keys, values], 1)
    longer = torch.cat([cache, torch.randn(2, 6, 20, 64)], 2)  # 20 more cached positions, all masked
    longer_mask = torch.cat([mask, torch.full((2, 1, 9, 20), NEG)], -1)
    assert torch.equal(kernels.cached_attention(query, longer[:, :3], longer[:, 3:], longer_mask), together)


def test_a_row_whose_whole_chunk_is_masked(kernels):
    query, keys, values, mask = case(1, 2, 600)
    mask[0, 0, 0, :256] = NEG  # the first 256-key chunk hidden from row 0
    expected = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    torch.testing.assert_close(kernels.cached_attention(query, keys, values, mask), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda q, k, v, m: (q.double(), k, v, m), "float32 queries"),
        (lambda q, k, v, m: (q[..., :12], k[..., :12], v[..., :12], m), "multiple of 8"),
        (lambda q, k, v, m: (q, k, v, m[..., :-1]), "mask must be"),
    ],
)
def test_bad_input_is_a_clear_error(kernels, change, message):
    with pytest.raises(RuntimeError, match=message):
        kernels.cached_attention(*change(*case(1, 3, 40)))
