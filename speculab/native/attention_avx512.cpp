// cached_attention's work on one (batch, KV head, chunk of keys) for CPUs with AVX512F: every query row of the
// KV head at once (all query heads of the group, all new tokens), each key and value read once for all of them.
//
// Why: a verify of q tokens gives a KV head group * q query rows (12 for q = 4 on a 9/3-head model). Read once
// per row, as the AVX2 kernel does, the chunk's keys and values are fetched 12 times and each score ends in a
// horizontal sum. Here the chunk's keys are transposed once (16x16 blocks in registers) so that 16 keys' scores
// are one vector of fused multiply-adds over the head dimension, and the values are read once for a block of rows.
//
// Each row's arithmetic is still its own and fixed: a score is one FMA chain over the head dimension in order,
// then scaled; the softmax sums lane by lane in key order and then across the lanes; the output is one FMA chain
// over the chunk's keys in order. So a row's result does not depend on the other rows, the batch or the threads.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "attention.h"
#include "attention_next.h"
#include "bf16_linear.h"

#if defined(__AVX512F__)

#include "vec_math.h"

namespace {

constexpr int64_t kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// kt[(j / 16 * d + e) * 16 + j % 16] = key j's value e, for the chunk's n keys (zero past n, up to a multiple of
// 16): each group of 16 keys is one contiguous d x 16 block. (A [d, keys] layout was 13-20% slower over the
// attention: its rows lie a kilobyte apart, so the score loop strides and the stores alias the keys' loads.)
// While it runs, the chunk's values are fetched into L2 and the keys two blocks ahead into L1 (prefetch): the
// hardware's streamer stops at each 4 KiB page. Values to L2 rather than L1 measured 3-8% faster (interleaved,
// batch 1 q = 1 and 4, batch 16); no prefetch at all 10-20% slower at batch 16.
void transpose_keys(const float* k, const float* v, int64_t kv_stride, int64_t n, int64_t d, float* kt) {
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    for (int64_t j = j0; j < std::min(n, j0 + kLanes); ++j)
      for (int64_t e = 0; e < d; e += kLanes) {
        _mm_prefetch(reinterpret_cast<const char*>(v + j * kv_stride + e), _MM_HINT_T1);  // L2: L1 holds the keys
        if (j + 2 * kLanes < n) _mm_prefetch(reinterpret_cast<const char*>(k + (j + 2 * kLanes) * kv_stride + e), _MM_HINT_T0);
      }
    float* block = kt + j0 * d;
    for (int64_t e0 = 0; e0 < d; e0 += kLanes) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = j0 + i < n ? _mm512_loadu_ps(k + (j0 + i) * kv_stride + e0) : _mm512_setzero_ps();
      vec::transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(block + (e0 + i) * kLanes, r[i]);
    }
  }
}

// scores[r * ld + j] = scale * (q_r . k_j) for RB rows and G groups of 16 keys from key g0 * 16 (kt as above).
template <int RB, int G>
void score_block(const float* q, int64_t d, const float* kt, int64_t ld, int64_t g0, float scale, float* scores, NextChunk& next) {
  __m512 acc[RB][G];
  for (int r = 0; r < RB; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  for (int64_t e = 0; e < d; ++e) {
    if (next.due(e)) next.step();
    __m512 kv[G];
    for (int g = 0; g < G; ++g) kv[g] = _mm512_loadu_ps(kt + ((g0 + g) * d + e) * kLanes);
    for (int r = 0; r < RB; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * d + e]);
      for (int g = 0; g < G; ++g) acc[r][g] = _mm512_fmadd_ps(qv, kv[g], acc[r][g]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int r = 0; r < RB; ++r)
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(scores + r * ld + (g0 + g) * kLanes, _mm512_mul_ps(acc[r][g], s));
}

// Every row's scores over a group range of keys [g0, g0 + G) while those keys' transposed block stays in L1:
// rows in blocks of 4, the last one to three rows together.
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

// Key groups outer, rows inner: a block of 4 groups of transposed keys (d * 64 floats) is read from L2 once and
// reused from L1 by every block of rows.
void score_rows(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ld, int64_t groups, float scale, float* scores,
                NextChunk& next) {
  int64_t g = 0;
  for (; g + 4 <= groups; g += 4) score_groups<4>(q, rows, d, kt, ld, g, scale, scores, next);
  for (; g < groups; ++g) score_groups<1>(q, rows, d, kt, ld, g, scale, scores, next);
}

// out[r] = sum_j p[r * ld + j] * v_j over the chunk's n keys, for RB rows and V vectors of 16 values each.
template <int RB, int V>
void value_block(const float* p, int64_t ld, const float* v, int64_t kv_stride, int64_t n, float* out, int64_t d, NextChunk& next) {
  __m512 acc[RB][V];
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < V; ++x) acc[r][x] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    if (next.due(j)) next.step();
    __m512 vv[V];
    for (int x = 0; x < V; ++x) vv[x] = _mm512_loadu_ps(v + j * kv_stride + x * kLanes);
    for (int r = 0; r < RB; ++r) {
      const __m512 pv = _mm512_set1_ps(p[r * ld + j]);
      for (int x = 0; x < V; ++x) acc[r][x] = _mm512_fmadd_ps(pv, vv[x], acc[r][x]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < V; ++x) _mm512_storeu_ps(out + r * d + x * kLanes, acc[r][x]);
}

// Rows a value block takes for V vectors of 16 values: RB * V accumulators and V values within 32 registers.
constexpr int value_block_rows(int64_t v) { return v <= 4 ? 6 : 3; }

// Rows in blocks of RB, the remainder in one block of its own size (a lone row is latency-bound: V chains).
template <int V, int RB = value_block_rows(V)>
void value_rows(const float* p, int64_t ld, const float* v, int64_t kv_stride, int64_t n, int64_t rows, float* out, int64_t d,
                NextChunk& next) {
  int64_t r = 0;
  for (; r + RB <= rows; r += RB) value_block<RB, V>(p + r * ld, ld, v, kv_stride, n, out + r * d, d, next);
  const float* pr = p + r * ld;
  float* o = out + r * d;
  switch (rows - r) {
    case 5: if constexpr (RB > 5) value_block<5, V>(pr, ld, v, kv_stride, n, o, d, next); break;
    case 4: if constexpr (RB > 4) value_block<4, V>(pr, ld, v, kv_stride, n, o, d, next); break;
    case 3: if constexpr (RB > 3) value_block<3, V>(pr, ld, v, kv_stride, n, o, d, next); break;
    case 2: value_block<2, V>(pr, ld, v, kv_stride, n, o, d, next); break;
    case 1: value_block<1, V>(pr, ld, v, kv_stride, n, o, d, next); break;
    default: break;
  }
}

// Row r's softmax numerators over the chunk, in place: exp(score + mask - max), zero past n; its max and sum.
void softmax_row(float* s, const float* mask, int64_t n, int64_t padded, AttentionPartial& part) {
  __m512 mx = _mm512_set1_ps(kNegInf);
  for (int64_t j = 0; j < padded; j += kLanes) {
    const __mmask16 live = j + kLanes <= n ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    const __m512 v = _mm512_mask_add_ps(_mm512_set1_ps(kNegInf), live, _mm512_loadu_ps(s + j), _mm512_maskz_loadu_ps(live, mask + j));
    _mm512_storeu_ps(s + j, v);
    mx = _mm512_max_ps(mx, v);
  }
  part.max = _mm512_reduce_max_ps(mx);
  if (part.max == kNegInf) {
    for (int64_t j = 0; j < padded; j += kLanes) _mm512_storeu_ps(s + j, _mm512_setzero_ps());
    part.sum = 0.f;
    return;
  }
  const __m512 m = _mm512_set1_ps(part.max);
  __m512 total = _mm512_setzero_ps();
  for (int64_t j = 0; j < padded; j += kLanes) {
    const __m512 e = vec::exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
    _mm512_storeu_ps(s + j, e);
    total = _mm512_add_ps(total, e);
  }
  part.sum = _mm512_reduce_add_ps(total);
}

}  // namespace

bool chunk_partials_avx512(const AttentionChunk& c, AttentionPartial* partials, float* out, std::vector<float>& buffer) {
  if (!avx512_in_use() || c.d % kLanes || c.d > 128) return false;
  const int64_t n = c.j1 - c.j0, groups = (n + kLanes - 1) / kLanes, ld = groups * kLanes;
  buffer.resize(c.d * ld + c.rows * ld);
  float *kt = buffer.data(), *scores = kt + c.d * ld;
  transpose_keys(c.k + c.j0 * c.kv_stride, c.v + c.j0 * c.kv_stride, c.kv_stride, n, c.d, kt);
  // The arithmetic's loop iterations (scores, values), over which the next chunk's lines are spread.
  const int64_t value_rows_at_once = value_block_rows(c.d / kLanes);
  NextChunk next(c, (c.rows + 3) / 4 * ((groups + 3) / 4) * c.d + (c.rows + value_rows_at_once - 1) / value_rows_at_once * n);
  score_rows(c.q, c.rows, c.d, kt, ld, groups, c.scale, scores, next);
  for (int64_t r = 0; r < c.rows; ++r) softmax_row(scores + r * ld, c.mask + r * c.mask_row_stride + c.j0, n, ld, partials[r]);
  const float* v = c.v + c.j0 * c.kv_stride;
  switch (c.d / kLanes) {
    case 1: value_rows<1>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
    case 2: value_rows<2>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
    case 3: value_rows<3>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
    case 4: value_rows<4>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
    case 5: value_rows<5>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
    case 6: value_rows<6>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
    case 7: value_rows<7>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
    default: value_rows<8>(scores, ld, v, c.kv_stride, n, c.rows, out, c.d, next); break;
  }
  return true;
}

#else

bool chunk_partials_avx512(const AttentionChunk&, AttentionPartial*, float*, std::vector<float>&) { return false; }

#endif
