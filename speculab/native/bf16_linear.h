// fp32 activations times bf16 weights packed by bf16_pack (see bf16_linear.cpp).
#pragma once
#include <torch/extension.h>

torch::Tensor bf16_pack(torch::Tensor w);
// residual: y = residual + x @ W.T, the residual connection's sum made in the store (not with a bias).
torch::Tensor bf16_linear(torch::Tensor x, torch::Tensor packed, int64_t n, c10::optional<torch::Tensor> bias,
                          c10::optional<torch::Tensor> residual = c10::nullopt);
