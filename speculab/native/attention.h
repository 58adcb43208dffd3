// Attention of a few new tokens over the KV cache (see attention.cpp).
#pragma once
#include <torch/extension.h>

// query [batch, kv_heads, rows, d]; keys/values [batch, kv_heads, length, d] (any strides, last dim contiguous);
// mask [batch, 1, rows, length] additive (0 or -inf). Returns [batch, kv_heads, rows, d].
torch::Tensor cached_attention(torch::Tensor query, torch::Tensor keys, torch::Tensor values, torch::Tensor mask);
