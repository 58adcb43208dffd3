"""Linear layers prepacked for oneDNN on the CPU.

Knows: that oneDNN's prepacked matmul (``mkldnn._reorder_linear_weight`` with
``mkldnn._linear_pointwise``) beats the default BLAS call for the small-M
matmuls of decoding, and that it is only available for some dtype/CPU pairs
(bf16 needs AVX512-BF16/AMX or AVX-NE-CONVERT). The batch hint picks the packed
layout: a hint of 1 gives a GEMV layout that oneDNN must reorder again on every
call with more than one row (2-3x slower for the 2-32-row matmuls of
verification and batched decode, measured by ``benchmarks/linear_pack.py``);
any hint of 2 or more gives a GEMM layout that is as fast for one row.
Does not know: anything about the model; it swaps ``nn.Linear`` modules wherever it finds them.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn


class PackedLinear(nn.Module):
    """Inference-only replacement for ``nn.Linear`` holding a oneDNN-packed weight."""

    def __init__(self, linear: nn.Linear, batch_hint: int = 16):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_hint)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


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


def prepack_linears(module: nn.Module, skip: tuple[nn.Module, ...] = ()) -> int:
    """Replace every CPU nn.Linear below ``module`` (except ``skip``) by a PackedLinear; returns the count."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and child not in skip:
            if child.weight.device.type == "cpu" and can_prepack(child.weight.dtype):
                setattr(module, name, PackedLinear(child))
                count += 1
        else:
            count += prepack_linears(child, skip)
    return count
