"""The native bf16-weight linear kernels: exact widening, fp32 accumulation, rows independent of each other.

Two layouts: the FMA kernels' panels (AVX2, AVX512) and, on CPUs with AMX, the AMX kernel's tiles; ``pack`` makes
the AMX one when ``use_amx`` is on (the default) and the CPU has AMX. Each test says which it holds.
"""

import contextlib

import pytest
import torch

from speculab import native
from speculab.cpu import cpu_flags
from speculab.models.linear import NativeLinear, is_bf16_exact, native_kernels_for


@pytest.fixture(scope="module")
def kernels():
    module = native.kernels()
    assert module is not None, f"native kernels not built ({native.disabled_reason() or native.build_dir()}): run `make setup`"
    return module


def bf16_weight(n: int, k: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


@contextlib.contextmanager
def amx(kernels, on: bool):
    before = kernels.use_amx(on)
    try:
        yield
    finally:
        kernels.use_amx(before)


def fma_pack(kernels, w: torch.Tensor) -> torch.Tensor:
    with amx(kernels, False):
        return kernels.pack(w)


def amx_pack(kernels, w: torch.Tensor) -> torch.Tensor:
    with amx(kernels, True):
        if not kernels.amx_in_use():
            pytest.skip("this CPU has no AMX (or the kernels were built without it)")
        packed = kernels.pack(w)
    assert packed.shape[-1] == 32, "a weight with a multiple of 32 input features takes the AMX layout"
    return packed


LAYOUTS = {"fma": fma_pack, "amx": amx_pack}


# (out, in): the model's shapes, a tail that is not a multiple of 16 columns, and one under one panel
# the AMX layout only where it applies: a multiple of 32 input features (the other widths are tested below)
SHAPES = [(layout, n, k) for layout in LAYOUTS for n, k in [(96, 64), (100, 72), (7, 8), (49, 576)] if layout == "fma" or k % 32 == 0]


@pytest.mark.parametrize("layout,n,k", SHAPES)
@pytest.mark.parametrize("m", [1, 2, 5, 6, 7, 13, 40])
def test_matches_a_float64_reference(kernels, n, k, m, layout):
    w = bf16_weight(n, k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    bias = torch.randn(n)
    got = kernels.linear(x, LAYOUTS[layout](kernels, w), n, bias)
    ref = (x.double() @ w.double().T + bias.double()).float()
    # fp32 accumulation over k terms: the error grows like sqrt(k) ulps of the terms' magnitude
    assert got.shape == (m, n)
    torch.testing.assert_close(got, ref, rtol=0, atol=2e-5 * k**0.5 * float(x.abs().max() * w.float().abs().max()))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_row_is_bit_identical_whatever_shares_the_call(kernels, layout):
    """A verify forward over q rows gives exactly what q one-row forwards give (the lossless contract's basis).

    The AMX kernel puts up to 16 rows in a tile, so 40 rows span tiles of 16, 16 and 8 and the splits change
    which rows share a tile and how tall it is; the residual sum in the store is covered too.
    """
    w = LAYOUTS[layout](kernels, bf16_weight(200, 96, seed=1))
    x, residual = torch.randn(40, 96), torch.randn(40, 200)
    together = kernels.linear(x, w, 200, None, residual)
    for split in ([1] * 40, [5, 6, 12, 17], [7, 16, 16, 1], [33, 7]):
        parts = zip(x.split(split), residual.split(split), strict=True)
        assert torch.equal(torch.cat([kernels.linear(xs, w, 200, None, r) for xs, r in parts]), together)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_rows_give_no_rows(kernels, layout):
    w = LAYOUTS[layout](kernels, bf16_weight(40, 64))
    assert kernels.linear(torch.randn(0, 64), w, 40, None).shape == (0, 40)


def test_leading_dimensions_are_kept(kernels):
    w = bf16_weight(32, 16)
    x = torch.randn(2, 3, 16)
    assert kernels.linear(x, kernels.pack(w), 32, None).shape == (2, 3, 32)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda k: k.linear(torch.randn(2, 16, dtype=torch.float64), k.pack(bf16_weight(8, 16)), 8, None), "x must be float32"),
        (lambda k: k.linear(torch.randn(2, 24), k.pack(bf16_weight(8, 16)), 8, None), "x has 24 features, the weight expects 16"),
        (lambda k: k.linear(torch.randn(2, 16), bf16_weight(8, 16), 8, None), "weight must come from pack"),
        (lambda k: k.linear(torch.randn(2, 16), k.pack(bf16_weight(8, 16)), 40, None), "n does not match"),
    ],
)
def test_bad_input_is_a_clear_error(kernels, call, message):
    with pytest.raises(RuntimeError, match=message):
        call(kernels)


def test_only_bf16_numbers_take_the_native_path(kernels):
    exact = torch.nn.Linear(16, 8).requires_grad_(False)
    exact.weight.copy_(exact.weight.to(torch.bfloat16))
    exact.bias.copy_(exact.bias.to(torch.bfloat16))
    assert is_bf16_exact(exact.weight) and native_kernels_for(exact) is kernels
    rounded_away = torch.nn.Linear(16, 8)  # fp32 random weights are not bf16 numbers: widening them would change the model
    assert not is_bf16_exact(rounded_away.weight) and native_kernels_for(rounded_away) is None
    layer = NativeLinear(exact, kernels)
    x = torch.randn(3, 16)
    torch.testing.assert_close(layer(x), exact(x), rtol=1e-6, atol=1e-6)


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("SPECULAB_NATIVE", "0")
    native.kernels.cache_clear()
    try:
        assert native.kernels() is None and native.disabled_reason() == "SPECULAB_NATIVE=0"
    finally:
        monkeypatch.undo()
        native.kernels.cache_clear()


def fma_chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [m, k] fp32 @ w [n, k] bf16 .T as one fused multiply-add chain over k in order, rounded to fp32 each step.

    A float32 x times a bf16 weight is exact in float64 (24 + 8 significant bits), and so, for these magnitudes,
    is its sum with an fp32 accumulator: rounding that sum to fp32 is what an FMA does.
    """
    acc = torch.zeros(x.shape[0], w.shape[0], dtype=torch.float32)
    xd, wd = x.double(), w.double()
    for i in range(x.shape[1]):
        acc = (acc.double() + xd[:, i : i + 1] * wd[:, i][None, :]).float()
    return acc


@pytest.mark.parametrize("m", [1, 3, 4, 8, 9, 16, 17])
def test_every_output_is_the_fma_chain_in_k_order(kernels, m):
    """Bit for bit the chain, on AVX2 and AVX512 kernels alike, for every row count and a ragged last panel."""
    w = bf16_weight(200, 64, seed=m)
    x = torch.randn(m, 64, generator=torch.Generator().manual_seed(100 + m))
    assert torch.equal(kernels.linear(x, fma_pack(kernels, w), 200, None), fma_chain(x, w))


@pytest.mark.parametrize("m", [1, 2, 5, 6])
def test_a_residual_is_added_to_the_chain_once_each_column_in_its_place(kernels, m):
    """The one-row and few-row kernels hold a panel's even and odd columns apart until the store: the sum with the
    residual must still land on each column (a ragged last panel included)."""
    w = bf16_weight(200, 64, seed=m)
    x = torch.randn(m, 64, generator=torch.Generator().manual_seed(200 + m))
    residual = torch.arange(m * 200, dtype=torch.float32).reshape(m, 200)  # every column its own value
    assert torch.equal(kernels.linear(x, fma_pack(kernels, w), 200, None, residual), residual + fma_chain(x, w))


def test_the_avx2_and_avx512_kernels_give_the_same_bits(kernels):
    """On an AVX512 CPU both kernel sets run (the switch picks); elsewhere the switch must say AVX512 is not in use."""
    w = fma_pack(kernels, bf16_weight(300, 576, seed=7))
    x = torch.randn(21, 576, generator=torch.Generator().manual_seed(7))
    residual = torch.randn(21, 300)
    wide = kernels.linear(x, w, 300, None, residual)
    before = kernels.use_avx512(False)
    try:
        assert not kernels.avx512_in_use()
        narrow = kernels.linear(x, w, 300, None, residual)
    finally:
        kernels.use_avx512(before)
    assert kernels.avx512_in_use() == ("avx512f" in cpu_flags())
    assert torch.equal(wide, narrow)


def test_the_amx_kernel_loses_no_bit_of_an_activation(kernels):
    """x @ I.T is x itself: the three bf16 parts of every fp32 activation add back to it exactly (full 24-bit
    mantissas, magnitudes from 1e-30 to 1e30, both signs)."""
    k = 64
    x = torch.randn(9, k) * torch.logspace(-30, 30, 9)[:, None]
    assert (x.view(torch.int32) & 0xFFFF).count_nonzero() > 0.9 * x.numel()  # the low 16 bits are really used
    identity = amx_pack(kernels, torch.eye(k, dtype=torch.bfloat16))
    assert torch.equal(kernels.linear(x, identity, k, None), x)


def test_the_amx_kernel_is_at_least_as_close_to_float64_as_the_fma_chain(kernels):
    w = bf16_weight(3072, 576, seed=3)
    x = torch.randn(16, 576, generator=torch.Generator().manual_seed(3))
    ref = x.double() @ w.double().T
    error = {name: (kernels.linear(x, pack(kernels, w), 3072, None).double() - ref).abs().max() for name, pack in LAYOUTS.items()}
    assert error["amx"] <= error["fma"], error


def test_the_amx_layout_needs_a_multiple_of_32_input_features(kernels):
    """Other widths keep the FMA kernels' panels (tiny models' odd shapes), and the AMX switch off keeps them all."""
    amx_pack(kernels, bf16_weight(8, 32))  # skips where there is no AMX
    with amx(kernels, True):
        assert kernels.pack(bf16_weight(8, 48)).shape == (1, 48, 16)
    assert fma_pack(kernels, bf16_weight(8, 64)).shape == (1, 64, 16)


def test_the_amx_switch_follows_the_environment(monkeypatch):
    for value, expected in (("0", False), ("1", "amx_bf16" in cpu_flags())):
        monkeypatch.setenv("SPECULAB_AMX", value)
        native.kernels.cache_clear()
        try:
            assert native.kernels().amx_in_use() == expected
        finally:
            monkeypatch.undo()
            native.kernels.cache_clear()
