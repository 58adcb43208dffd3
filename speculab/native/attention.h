// Attention of a few new tokens over the KV cache (see attention.cpp).
#pragma once
#include <torch/extension.h>

#include <limits>
#include <vector>

// query [batch, kv_heads, rows, d]; keys/values [batch, kv_heads, length, d] (any strides, last dim contiguous);
// mask [batch, 1, rows, length] additive (0 or -inf). Returns [batch, kv_heads, rows, d].
torch::Tensor cached_attention(torch::Tensor query, torch::Tensor keys, torch::Tensor values, torch::Tensor mask);

// The kernels' work on one (batch, KV head, chunk of keys [j0, j1)): every query row's partial softmax.
struct AttentionPartial {  // one row over one chunk: its max score and its sum of exp(score - max)
  float max = -std::numeric_limits<float>::infinity(), sum = 0.f;
};
struct AttentionChunk {
  const float* q;  // [rows, d] contiguous
  int64_t rows;
  const float *k, *v;  // the head's keys and values from position 0, kv_stride floats apart
  int64_t kv_stride;
  const float* mask;  // [rows, length] additive, mask_row_stride apart
  int64_t mask_row_stride, j0, j1, d;
  float scale;
  // The thread's next chunk (null when this is its last): its keys' and values' first rows and their count, fetched
  // into L2 a few lines at a time during this chunk's arithmetic so that memory and arithmetic overlap.
  const float *next_k = nullptr, *next_v = nullptr;
  int64_t next_n = 0;
};
// The AVX512 version (attention_avx512.cpp): out [rows, d] unnormalised, partials [rows]. Returns false,
// computing nothing, when built without AVX512F or when d is not a multiple of 16 up to 128.
bool chunk_partials_avx512(const AttentionChunk& chunk, AttentionPartial* partials, float* out, std::vector<float>& buffer);
