// The small per-row operations of a decoder layer, written for fp32 rows (see ops.cpp).
#pragma once
#include <torch/extension.h>

// x [rows, hidden] -> x / rms(x) * weight (weight may be empty: no scale).
torch::Tensor rms_norm_rows(torch::Tensor x, torch::Tensor weight, double eps);

// qkv [batch, q, (heads + 2*kv_heads) * d] -> the rotated queries [batch, kv_heads, group*q, d] (row g*q + i is
// query head kv*group + g at position i); the rotated keys and the values are written into the layer's cache
// kv [slots, 2*kv_heads, max_len, d] at (rows[b], cache_pos[b, i]). cos/sin: [batch, 1, q, d] (sin signed).
torch::Tensor rope_and_write(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor kv, torch::Tensor rows,
                             torch::Tensor cache_pos, int64_t heads, int64_t kv_heads, int64_t d);

// gate_up [rows, 2*I] -> silu(gate) * up [rows, I].
torch::Tensor silu_mul(torch::Tensor gate_up);
