"""Linear layers for inference on the CPU: speculab's bf16-weight kernel, or oneDNN's prepacked matmul.

Knows: that decoding is bound by reading the weights, so an fp32 model whose weights are all bf16 numbers
(any bf16 checkpoint) is run by ``native/bf16_linear.cpp`` from bf16 storage, widened exactly to fp32
(on AMX CPUs ``native/bf16_linear_amx.cpp``: the same fp32 product on the tiles, its own rounding):
half the traffic, the same fp32 product (on AVX2: 1.9-3.2x oneDNN's fp32 speed for 1-4 rows, 1.1-1.4x
at 16, 0.9-1.3x at 64-256, ``benchmarks/kernels_alone.py linear``), and every row's result independent of the
other rows in the call. Otherwise: that oneDNN's prepacked matmul (``mkldnn._reorder_linear_weight`` with
``mkldnn._linear_pointwise``) beats the default BLAS call for the small-M
matmuls of decoding, and that it is only available for some dtype/CPU pairs
(bf16 needs AVX512-BF16/AMX or AVX-NE-CONVERT). The batch hint picks the packed
layout: a hint of 1 gives a GEMV layout that oneDNN must reorder again on every
call with more than one row (2-3x slower for the 2-32-row matmuls of
verification and batched decode, measured by ``benchmarks/kernels_alone.py linear-pack``);
any hint of 2 or more gives a GEMM layout that is as fast for one row.
Does not know: anything about the model; it swaps ``nn.Linear`` modules wherever it finds them.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from speculab import native


class PackedLinear(nn.Module):
    """Inference-only replacement for ``nn.Linear`` holding a oneDNN-packed weight."""

    def __init__(self, linear: nn.Linear, batch_hint: int = 16):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_hint)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


class NativeLinear(nn.Module):
    """Inference-only replacement for an fp32 ``nn.Linear`` whose weights are bf16 numbers: bf16 panels, fp32 math."""

    def __init__(self, linear: nn.Linear, kernels):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.kernels = kernels
        # [ceil(out/16), in, 16] for the FMA kernels, [ceil(out/16), in/2, 32] for the AMX one (kernels.use_amx)
        self.packed = kernels.pack(linear.weight.detach().to(torch.bfloat16))
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        return self.kernels.linear(x, self.packed, self.out_features, self.bias)


def is_bf16_exact(t: Tensor) -> bool:
    """True when every value of the fp32 tensor ``t`` is a bf16 number (its low 16 bits are zero)."""
    if t.dtype != torch.float32:
        return False
    bits = t.detach().reshape(-1).view(torch.int32)
    return all(not (chunk & 0xFFFF).any() for chunk in bits.split(1 << 22))


def native_kernels_for(module: nn.Module):
    """The native kernel module when every CPU linear below ``module`` can use it, else None.

    All or none: a model whose linears mixed two kernels would round differently layer by layer for no gain.
    """
    kernels = native.kernels()
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if kernels is None or not linears:
        return None
    fits = all(m.weight.device.type == "cpu" and m.in_features % 8 == 0 and is_bf16_exact(m.weight) for m in linears)
    return kernels if fits else None


@functools.cache
def can_prepack(dtype: torch.dtype) -> bool:
    """True when oneDNN prepacking works and gives the same result as F.linear for this dtype."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        lin = nn.Linear(64, 48, bias=True).to(dtype)
        x = torch.randn(3, 5, 64, dtype=dtype)
        ref = lin(x)
        got = PackedLinear(lin)(x)
        return torch.allclose(ref.float(), got.float(), rtol=2e-2, atol=2e-2)
    except (RuntimeError, AttributeError):
        return False


def inference_linear(linear: nn.Linear, kernels=None) -> nn.Module:
    """The fastest exact stand-in for ``linear``: native (when ``kernels`` is given), oneDNN-packed, or itself."""
    if kernels is not None:
        return NativeLinear(linear, kernels)
    if linear.weight.device.type == "cpu" and can_prepack(linear.weight.dtype):
        return PackedLinear(linear)
    return linear


def prepack_linears(module: nn.Module, kernels=None) -> int:
    """Replace every nn.Linear below ``module`` by its ``inference_linear``; returns how many changed."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            replacement = inference_linear(child, kernels)
            setattr(module, name, replacement)
            count += replacement is not child
        else:
            count += prepack_linears(child, kernels)
    return count


def linear_kind(model: nn.Module) -> str:
    """What runs ``model``'s linear layers, for result records.

    "native-bf16" (the AVX2 kernels), "native-bf16-avx512", "native-bf16-amx", "onednn-packed" or "pytorch".
    """
    for module in model.modules():
        if isinstance(module, NativeLinear):
            if module.packed.shape[-1] == 32:  # the AMX kernel's layout
                return "native-bf16-amx"
            return "native-bf16-avx512" if module.kernels.avx512_in_use() else "native-bf16"
        if isinstance(module, PackedLinear):
            return "onednn-packed"
    return "pytorch"
