// Attention of a few new tokens over the KV cache (see attention.cpp).
#pragma once
#include <torch/extension.h>

#include <limits>
#include <vector>

// query [batch, kv_heads, rows, d] fp32; keys/values [batch, kv_heads, length, d] fp32 or bf16 (any strides, last dim
// contiguous); mask [batch, 1, rows, length] additive (0 or -inf). Returns [batch, kv_heads, rows, d] fp32.
// A bf16 cache runs on the AMX kernel where the tiles are there (attention_amx.cpp), else as fp32 (widened, exact).
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
// The AVX2 + FMA version (attention_avx2.cpp), for d a multiple of 8 up to 128; the same outputs' meaning.
void chunk_partials_avx2(const AttentionChunk& chunk, AttentionPartial* partials, float* out, std::vector<float>& buffer);

// The AMX kernel's work on one (batch, KV head, chunk of keys) of a bf16 cache (attention_amx.cpp).
struct AttentionChunkBf16 {
  // [stacked, d]: the queries' three bf16 planes (amx_split_planes) stacked, row p * rows + r = query row r's plane p,
  // then zero rows up to `stacked` (a multiple of min(stacked, 16)): one tile product makes all three planes' sums.
  const uint16_t* q_stacked;
  int64_t rows, stacked;
  const uint16_t *k, *v;  // the head's keys and values from position 0, kv_stride elements apart
  int64_t kv_stride;
  const float* mask;  // [rows, length] additive, mask_row_stride apart
  int64_t mask_row_stride, j0, j1, d;
  float scale;
  const uint16_t *next_k = nullptr, *next_v = nullptr;  // the thread's next chunk (null: none), fetched meanwhile
  int64_t next_n = 0;
};
// out [rows, d] unnormalised, partials [rows]; the tiles configured by amx_configure(min(stacked, 16), 2).
bool chunk_partials_amx(const AttentionChunkBf16& chunk, AttentionPartial* partials, float* out);
// Whether this build and process run the AMX attention for head dimension d (a multiple of 32, at most 128).
bool attention_amx_available(int64_t d);
void amx_release();  // give the tile registers back after a thread's last tile product
