// bf16_linear's kernels for CPUs with AVX512F: the same packed weights, the same fp32 FMA chains, 16 lanes.
//
// Why: on AVX512 a one-lane-per-column kernel does twice the multiply-adds of the AVX2 one per instruction, and
// with 32 vector registers a block of up to 8 rows shares each widened weight vector. A verify of q <= 8 rows
// then reads the weights once at about the cost of one row (the arithmetic hides under the memory reads; see
// benchmarks/forward.py machine-floor for the crossover), and more rows (batched decode, prefill) reuse each panel
// from the L1/L2 cache, block after block.
//
// Every output element is still one FMA chain over k in order 0..K-1, the AVX2 kernels' chain: the result is
// bit for bit theirs, and a row's result never depends on which other rows share the call.
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "bf16_linear.h"

namespace {
bool avx512_on = true;
}  // namespace

bool use_avx512(bool on) {
  const bool before = avx512_on;
  avx512_on = on;
  return before;
}

bool avx512_in_use() {
#if defined(__AVX512F__)
  return avx512_on;
#else
  return false;
#endif
}

#if defined(__AVX512F__)

namespace {

constexpr int64_t kCols = 16;    // a panel's width: one zmm of fp32
constexpr int64_t kMaxRows = 8;  // rows in a block
// Each panel's weights are fetched 64 k ahead (2 KiB), by software: the hardware's streamer stops at every 4 KiB
// page, and a panel spans several. Measured on the model's four matrix shapes (sum, AVX512 Xeon): 15% faster at
// 1 row, 25-30% at 4-8 rows, 20% at 16; 32, 48, 96 and 128 k ahead were each slower than 64.
constexpr int64_t kPrefetchK = 64;

inline __m512 widen16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Panels per call for a block of MR rows: enough independent chains (MR * P >= 8) to cover the FMA latency on
// two ports, and MR * P + P accumulators and weights within the 32 registers.
template <int MR>
constexpr int panels_for() {
  return MR == 1 ? 8 : MR == 2 ? 4 : MR <= 4 ? 4 : 3;
}

// MR rows of x (row stride ldx) against P consecutive panels starting at panel p0; y and res have row stride n.
template <int MR, int P>
void block(const float* x, int64_t ldx, const uint16_t* w, int64_t k, int64_t p0, float* y, int64_t n, const float* res) {
  __m512 acc[MR][P];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const uint16_t* panel = w + p0 * k * kCols;
  for (int64_t i = 0; i < k; ++i) {
    if (!(i & 1))  // a 64-byte line holds two k of a panel
      for (int p = 0; p < P; ++p) _mm_prefetch(reinterpret_cast<const char*>(panel + (p * k + i + kPrefetchK) * kCols), _MM_HINT_T0);
    __m512 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = widen16(panel + (p * k + i) * kCols);
    for (int r = 0; r < MR; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + i]);
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p], acc[r][p]);
    }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t col = (p0 + p) * kCols;
    if (col >= n) break;
    const __mmask16 keep = col + kCols <= n ? __mmask16(0xFFFF) : __mmask16((1u << (n - col)) - 1);
    for (int r = 0; r < MR; ++r) {
      __m512 v = acc[r][p];
      if (res) v = _mm512_add_ps(_mm512_maskz_loadu_ps(keep, res + r * n + col), v);
      _mm512_mask_storeu_ps(y + r * n + col, keep, v);
    }
  }
}

// Panels [p, p1) for a block of MR rows: groups of P panels, the rest in groups of P/2, P/4, ... 1.
template <int MR, int P = panels_for<MR>()>
void rows_block(const float* x, int64_t k, const uint16_t* w, int64_t p, int64_t p1, float* y, int64_t n, const float* res) {
  for (; p + P <= p1; p += P) block<MR, P>(x, k, w, k, p, y, n, res);
  if constexpr (P > 1) rows_block<MR, P / 2>(x, k, w, p, p1, y, n, res);
}

using RowsBlock = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, const float*);
constexpr RowsBlock kRowsBlock[kMaxRows + 1] = {nullptr,        rows_block<1>, rows_block<2>, rows_block<3>, rows_block<4>,
                                                rows_block<5>, rows_block<6>, rows_block<7>, rows_block<8>};

}  // namespace

bool bf16_linear_avx512(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t panels, float* y, int64_t n,
                        const float* res) {
  if (!avx512_on) return false;
  // Each thread takes a contiguous range of panels (an even share). With one block of rows it runs through the
  // range once; with several, a few panels at a time (kept in the L1/L2 cache) against every block of rows.
  const int64_t step = m > kMaxRows ? 2 * panels_for<kMaxRows>() : panels;
  at::parallel_for(0, panels, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t p0 = t0; p0 < t1; p0 += step) {
      const int64_t p1 = std::min(t1, p0 + step);
      for (int64_t r0 = 0; r0 < m; r0 += kMaxRows) {
        const int64_t rows = std::min(kMaxRows, m - r0);
        kRowsBlock[rows](x + r0 * k, k, w, p0, p1, y + r0 * n, n, res ? res + r0 * n : nullptr);
      }
    }
  });
  return true;
}

#else

bool bf16_linear_avx512(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, const float*) { return false; }

#endif
