// cached_attention's work on one (batch, KV head, chunk of keys) with AVX2 + FMA: every query row of the KV head at
// once (all query heads of the group, all new tokens), each key and value read once for all of them. The AVX512
// kernel's design (attention_avx512.cpp) in 8 lanes and 16 registers.
//
// Why: computed one row at a time, a chunk's keys and values are fetched from memory for the first row and from
// L2 for the others, with no arithmetic overlapping the first fetch, and each score ends in a horizontal sum. On an
// EPYC Zen 1 (2 cores, AVX2) that ran the attention of a decode step at 4,096 tokens at 38% of its memory floor.
// Here the chunk's keys are transposed once (8x8 blocks in registers) so that 8 keys' scores are one vector of
// fused multiply-adds over the head dimension, the values are read once per block of rows, and the thread's next
// chunk is fetched during this one's arithmetic (attention_next.h).
//
// Each row's arithmetic is its own and fixed: a score is one FMA chain over the head dimension in order, then
// scaled; the softmax sums lane by lane in key order and then across the lanes; the output is one FMA chain over
// the chunk's keys in order. So a row's result does not depend on the other rows, the batch or the threads.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "attention.h"
#include "attention_next.h"
#include "vec_math.h"

namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kValueVectors = 4;  // values a pass takes: 4 vectors (32 floats) of the head dimension
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// kt[(j / 8 * d + e) * 8 + j % 8] = key j's value e, for the chunk's n keys (zero past n, up to a multiple of 8):
// each group of 8 keys is one contiguous d x 8 block. Meanwhile the chunk's values go to L2 and the keys two
// groups ahead to L1: the hardware's streamer stops at each 4 KiB page.
void transpose_keys(const float* k, const float* v, int64_t kv_stride, int64_t n, int64_t d, float* kt) {
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    for (int64_t j = j0; j < std::min(n, j0 + kLanes); ++j)
      for (int64_t e = 0; e < d; e += 16) {  // a 64-byte line holds 16 floats
        _mm_prefetch(reinterpret_cast<const char*>(v + j * kv_stride + e), _MM_HINT_T1);
        if (j + 2 * kLanes < n) _mm_prefetch(reinterpret_cast<const char*>(k + (j + 2 * kLanes) * kv_stride + e), _MM_HINT_T0);
      }
    float* block = kt + j0 * d;
    for (int64_t e0 = 0; e0 < d; e0 += kLanes) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = j0 + i < n ? _mm256_loadu_ps(k + (j0 + i) * kv_stride + e0) : _mm256_setzero_ps();
      vec::transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(block + (e0 + i) * kLanes, r[i]);
    }
  }
}

// scores[r * ld + j] = scale * (q_r . k_j) for RB rows and G groups of 8 keys from key g0 * 8 (kt as above):
// RB * G accumulators, G keys and a query within 16 registers.
template <int RB, int G>
void score_block(const float* q, int64_t d, const float* kt, int64_t ld, int64_t g0, float scale, float* scores, NextChunk& next) {
  __m256 acc[RB][G];
  for (int r = 0; r < RB; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  for (int64_t e = 0; e < d; ++e) {
    if (next.due(e)) next.step();
    __m256 kv[G];
    for (int g = 0; g < G; ++g) kv[g] = _mm256_loadu_ps(kt + ((g0 + g) * d + e) * kLanes);
    for (int r = 0; r < RB; ++r) {
      const __m256 qv = _mm256_broadcast_ss(q + r * d + e);
      for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(qv, kv[g], acc[r][g]);
    }
  }
  const __m256 s = _mm256_set1_ps(scale);
  for (int r = 0; r < RB; ++r)
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(scores + r * ld + (g0 + g) * kLanes, _mm256_mul_ps(acc[r][g], s));
}

// Every row's scores over groups [g0, g0 + G) while their transposed keys stay in L1: rows in blocks of 4, the
// last one to three rows together.
template <int G>
void score_groups(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ld, int64_t g0, float scale, float* scores,
                  NextChunk& next) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) score_block<4, G>(q + r * d, d, kt, ld, g0, scale, scores + r * ld, next);
  switch (rows - r) {
    case 3: score_block<3, G>(q + r * d, d, kt, ld, g0, scale, scores + r * ld, next); break;
    case 2: score_block<2, G>(q + r * d, d, kt, ld, g0, scale, scores + r * ld, next); break;
    case 1: score_block<1, G>(q + r * d, d, kt, ld, g0, scale, scores + r * ld, next); break;
    default: break;
  }
}

void score_rows(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ld, int64_t groups, float scale, float* scores,
                NextChunk& next) {
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) score_groups<2>(q, rows, d, kt, ld, g, scale, scores, next);
  for (; g < groups; ++g) score_groups<1>(q, rows, d, kt, ld, g, scale, scores, next);
}

// out[r][x0 * 8 ..] = sum_j p[r * ld + j] * v_j over the chunk's n keys, for RB rows and V vectors of 8 values
// from vector x0: RB * V accumulators, RB probabilities and a value within 16 registers.
template <int RB, int V>
void value_block(const float* p, int64_t ld, const float* v, int64_t kv_stride, int64_t n, float* out, int64_t d, int64_t x0,
                 NextChunk& next) {
  __m256 acc[RB][V];
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < V; ++x) acc[r][x] = _mm256_setzero_ps();
  const float* vx = v + x0 * kLanes;
  for (int64_t j = 0; j < n; ++j) {
    if (next.due(j)) next.step();
    __m256 pv[RB];
    for (int r = 0; r < RB; ++r) pv[r] = _mm256_broadcast_ss(p + r * ld + j);
    for (int x = 0; x < V; ++x) {
      const __m256 vv = _mm256_loadu_ps(vx + j * kv_stride + x * kLanes);
      for (int r = 0; r < RB; ++r) acc[r][x] = _mm256_fmadd_ps(pv[r], vv, acc[r][x]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < V; ++x) _mm256_storeu_ps(out + r * d + (x0 + x) * kLanes, acc[r][x]);
}

// RB rows over the head dimension in passes of up to kValueVectors vectors.
template <int RB>
void value_pass(const float* p, int64_t ld, const float* v, int64_t kv_stride, int64_t n, float* out, int64_t d, NextChunk& next) {
  const int64_t vectors = d / kLanes;
  int64_t x0 = 0;
  for (; x0 + kValueVectors <= vectors; x0 += kValueVectors) value_block<RB, kValueVectors>(p, ld, v, kv_stride, n, out, d, x0, next);
  switch (vectors - x0) {
    case 3: value_block<RB, 3>(p, ld, v, kv_stride, n, out, d, x0, next); break;
    case 2: value_block<RB, 2>(p, ld, v, kv_stride, n, out, d, x0, next); break;
    case 1: value_block<RB, 1>(p, ld, v, kv_stride, n, out, d, x0, next); break;
    default: break;
  }
}

// Rows in blocks of 3, the remainder in one block of its own size.
void value_rows(const float* p, int64_t ld, const float* v, int64_t kv_stride, int64_t n, int64_t rows, float* out, int64_t d,
                NextChunk& next) {
  int64_t r = 0;
  for (; r + 3 <= rows; r += 3) value_pass<3>(p + r * ld, ld, v, kv_stride, n, out + r * d, d, next);
  if (rows - r == 2) value_pass<2>(p + r * ld, ld, v, kv_stride, n, out + r * d, d, next);
  if (rows - r == 1) value_pass<1>(p + r * ld, ld, v, kv_stride, n, out + r * d, d, next);
}

// Row r's softmax numerators over the chunk, in place: exp(score + mask - max), zero past n; its max and sum.
void softmax_row(float* s, const float* mask, int64_t n, int64_t padded, AttentionPartial& part) {
  __m256 mx = _mm256_set1_ps(kNegInf);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(s + j), _mm256_loadu_ps(mask + j));
    _mm256_storeu_ps(s + j, v);
    mx = _mm256_max_ps(mx, v);
  }
  if (j < padded) {  // the last, short group: keys past n are -inf
    alignas(32) float tail[kLanes];
    for (int64_t i = 0; i < kLanes; ++i) tail[i] = j + i < n ? s[j + i] + mask[j + i] : kNegInf;
    const __m256 v = _mm256_load_ps(tail);
    _mm256_storeu_ps(s + j, v);
    mx = _mm256_max_ps(mx, v);
  }
  part.max = vec::hmax(mx);
  if (part.max == kNegInf) {
    for (j = 0; j < padded; j += kLanes) _mm256_storeu_ps(s + j, _mm256_setzero_ps());
    part.sum = 0.f;
    return;
  }
  const __m256 m = _mm256_set1_ps(part.max);
  __m256 total = _mm256_setzero_ps();
  for (j = 0; j < padded; j += kLanes) {
    const __m256 e = vec::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, e);
    total = _mm256_add_ps(total, e);
  }
  part.sum = vec::hsum(total);
}

}  // namespace

void chunk_partials_avx2(const AttentionChunk& c, AttentionPartial* partials, float* out, std::vector<float>& buffer) {
  const int64_t n = c.j1 - c.j0, groups = (n + kLanes - 1) / kLanes, ld = groups * kLanes;
  buffer.resize(c.d * ld + c.rows * ld);
  float *kt = buffer.data(), *scores = kt + c.d * ld;
  transpose_keys(c.k + c.j0 * c.kv_stride, c.v + c.j0 * c.kv_stride, c.kv_stride, n, c.d, kt);
  // The arithmetic's loop iterations (scores, values), over which the next chunk's lines are spread.
  const int64_t passes = (c.d / kLanes + kValueVectors - 1) / kValueVectors;
  NextChunk next(c, (c.rows + 3) / 4 * ((groups + 1) / 2) * c.d + (c.rows + 2) / 3 * passes * n);
  score_rows(c.q, c.rows, c.d, kt, ld, groups, c.scale, scores, next);
  for (int64_t r = 0; r < c.rows; ++r) softmax_row(scores + r * ld, c.mask + r * c.mask_row_stride + c.j0, n, ld, partials[r]);
  value_rows(scores, ld, c.v + c.j0 * c.kv_stride, c.kv_stride, n, c.rows, out, c.d, next);
}
