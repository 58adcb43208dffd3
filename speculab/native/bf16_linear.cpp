// y = x @ W.T (+ bias): fp32 activations, bf16 weights widened exactly to fp32, fp32 accumulation (AVX2 + FMA).
//
// Why: decoding on a CPU is bound by reading the weights, and bf16 storage halves that traffic; widening a
// bf16 to fp32 is exact (a 16-bit shift), so for a bf16 checkpoint the product is the fp32 model's.
// Every output element is one fused multiply-add chain over k in order 0..K-1, whatever the number of
// rows in the call: a row's result does not depend on which other rows share the call, so a q-token verify
// forward gives bit for bit what q one-token forwards give.
//
// Layout: W [N, K] is packed once as panels of 16 output columns, [ceil(N/16), K, 16], zero-padded, so
// the kernel reads each panel's weights for one k as two contiguous 8-float vectors.
#include "bf16_linear.h"

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kPanelCols = 16;

inline __m256 widen8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 16 bf16 in one load, widened as the even columns (a shift) and the odd ones (a mask): two vector ops for 16
// values where two widen8 take four, one of them a shuffle. The accumulators then hold even and odd columns, put
// back in order once, at the store (interleave16). Measured on an EPYC Zen 1 (AVX2 only): 1 to 5 rows 18-23%
// faster, the same bits (BENCHMARKS.md, "The AVX2 linear kernel at one to five rows").
inline void widen16(const uint16_t* p, __m256& even, __m256& odd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// The even and odd columns' accumulators as columns 0-7 and 8-15.
inline void interleave16(__m256 even, __m256 odd, __m256& low, __m256& high) {
  const __m256 a = _mm256_unpacklo_ps(even, odd), b = _mm256_unpackhi_ps(even, odd);  // [0-3 | 8-11], [4-7 | 12-15]
  low = _mm256_permute2f128_ps(a, b, 0x20);
  high = _mm256_permute2f128_ps(a, b, 0x31);
}

// MR rows of x against P consecutive panels (16*P columns starting at panel p0). Every loop over rows, panels and
// columns is unrolled whole, so the accumulators live in registers: left to itself GCC kept the array in memory,
// storing every accumulator each k, and the kernel ran at half the FMA rate (EPYC Zen 1: one row 12 -> 24 GB/s of
// weights, four rows 17.5 -> 37 GFLOP/s on one core, in a harness of this kernel alone; a 4-token verify at batch 1
// 1.94 -> 1.52 one-token forwards, BENCHMARKS.md "The AVX2 linear kernel at one to five rows"). Each panel's
// weights are fetched ahead by software (the hardware's streamer stops at every 4 KiB page): 64 k ahead with four panels in flight,
// 128 with one. Measured with these kernels on an AVX512 Xeon (use_avx512(False)), the model's four matrix shapes:
// 1 row 2.0 -> 1.45-1.5 ms, 4 rows 5.1-5.9 -> 2.3-2.4 ms.
template <int MR, int P, int64_t kPrefetchK = P == 1 ? 128 : 64>
void kernel(const float* x, int64_t ldx, const uint16_t* w, int64_t k, int64_t p0, float* y, int64_t ldy, int64_t n,
            const float* res) {
  __m256 acc[MR][2 * P];
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < 2 * P; ++c) acc[r][c] = _mm256_setzero_ps();
  const uint16_t* panel[P];
  #pragma GCC unroll 16
  for (int p = 0; p < P; ++p) panel[p] = w + (p0 + p) * k * kPanelCols;
  for (int64_t i = 0; i < k; ++i) {
    if (!(i & 1))  // a 64-byte line holds two k of a panel
      #pragma GCC unroll 16
      for (int p = 0; p < P; ++p) _mm_prefetch(reinterpret_cast<const char*>(panel[p] + (i + kPrefetchK) * kPanelCols), _MM_HINT_T0);
    __m256 wv[2 * P];  // a panel's even columns, then its odd ones
    #pragma GCC unroll 16
    for (int p = 0; p < P; ++p) widen16(panel[p] + i * kPanelCols, wv[2 * p], wv[2 * p + 1]);
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      __m256 xv = _mm256_broadcast_ss(x + r * ldx + i);
      #pragma GCC unroll 16
      for (int c = 0; c < 2 * P; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  const int64_t col0 = p0 * kPanelCols;
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    #pragma GCC unroll 16
    for (int p = 0; p < P; ++p) interleave16(acc[r][2 * p], acc[r][2 * p + 1], acc[r][2 * p], acc[r][2 * p + 1]);
    float* yr = y + r * ldy + col0;
    const float* rr = res ? res + r * ldy + col0 : nullptr;
    #pragma GCC unroll 16
    for (int c = 0; c < 2 * P; ++c) {
      const int64_t col = col0 + 8 * c;
      if (col + 8 <= n) {
        _mm256_storeu_ps(yr + 8 * c, rr ? _mm256_add_ps(_mm256_loadu_ps(rr + 8 * c), acc[r][c]) : acc[r][c]);
      } else if (col < n) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[r][c]);
        for (int64_t j = 0; col + j < n; ++j) yr[8 * c + j] = rr ? rr[8 * c + j] + tmp[j] : tmp[j];
      }
    }
  }
}

// The same chains as kernel<MR, 1>, for many rows: x is packed as [M/6, K, 6] (one stream per row
// block, six whole rows each) and the panel is already widened to fp32, so each k costs two loads, six
// broadcasts, twelve FMAs.
constexpr int kRows = 6;

void kernel_wide(const float* xb, const float* panel, int64_t k, int64_t p0, float* y, int64_t ldy, int64_t n, const float* res) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
         a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  for (int64_t i = 0; i < k; ++i) {
    const __m256 w0 = _mm256_loadu_ps(panel + i * kPanelCols), w1 = _mm256_loadu_ps(panel + i * kPanelCols + 8);
    const float* xi = xb + i * kRows;
    __m256 v = _mm256_broadcast_ss(xi);
    a00 = _mm256_fmadd_ps(v, w0, a00); a01 = _mm256_fmadd_ps(v, w1, a01);
    v = _mm256_broadcast_ss(xi + 1);
    a10 = _mm256_fmadd_ps(v, w0, a10); a11 = _mm256_fmadd_ps(v, w1, a11);
    v = _mm256_broadcast_ss(xi + 2);
    a20 = _mm256_fmadd_ps(v, w0, a20); a21 = _mm256_fmadd_ps(v, w1, a21);
    v = _mm256_broadcast_ss(xi + 3);
    a30 = _mm256_fmadd_ps(v, w0, a30); a31 = _mm256_fmadd_ps(v, w1, a31);
    v = _mm256_broadcast_ss(xi + 4);
    a40 = _mm256_fmadd_ps(v, w0, a40); a41 = _mm256_fmadd_ps(v, w1, a41);
    v = _mm256_broadcast_ss(xi + 5);
    a50 = _mm256_fmadd_ps(v, w0, a50); a51 = _mm256_fmadd_ps(v, w1, a51);
  }
  alignas(32) float out[kRows][kPanelCols];
  _mm256_store_ps(out[0], a00); _mm256_store_ps(out[0] + 8, a01);
  _mm256_store_ps(out[1], a10); _mm256_store_ps(out[1] + 8, a11);
  _mm256_store_ps(out[2], a20); _mm256_store_ps(out[2] + 8, a21);
  _mm256_store_ps(out[3], a30); _mm256_store_ps(out[3] + 8, a31);
  _mm256_store_ps(out[4], a40); _mm256_store_ps(out[4] + 8, a41);
  _mm256_store_ps(out[5], a50); _mm256_store_ps(out[5] + 8, a51);
  const int64_t col0 = p0 * kPanelCols, cols = std::min<int64_t>(kPanelCols, n - col0);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * ldy + col0 + c] = res ? res[r * ldy + col0 + c] + out[r][c] : out[r][c];
}

template <int MR>
void rows_kernel(int64_t mr, const float* x, const uint16_t* w, int64_t k, int64_t p, float* y, int64_t n, const float* res) {
  if constexpr (MR > 1) {
    if (mr < MR) return rows_kernel<MR - 1>(mr, x, w, k, p, y, n, res);
  }
  kernel<MR, 1>(x, k, w, k, p, y, n, n, res);
}

}  // namespace

torch::Tensor bf16_pack(torch::Tensor w) {
  TORCH_CHECK(w.dim() == 2, "bf16_linear.pack: weight must be 2-D");
  if (amx_in_use() && w.size(1) % 32 == 0) return amx_pack(w);
  const int64_t n = w.size(0), k = w.size(1), panels = (n + kPanelCols - 1) / kPanelCols;
  auto padded = torch::zeros({panels * kPanelCols, k}, w.options().dtype(torch::kBFloat16));
  padded.narrow(0, 0, n).copy_(w);
  return padded.view({panels, kPanelCols, k}).transpose(1, 2).contiguous();  // [panels, K, 16]
}

torch::Tensor bf16_linear(torch::Tensor x, torch::Tensor packed, int64_t n, c10::optional<torch::Tensor> bias,
                          c10::optional<torch::Tensor> residual) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "bf16_linear: x must be float32, got ", x.scalar_type());
  TORCH_CHECK(packed.scalar_type() == torch::kBFloat16 && packed.dim() == 3 && packed.is_contiguous() &&
                  (packed.size(2) == kPanelCols || packed.size(2) == 2 * kPanelCols),
              "bf16_linear: weight must come from pack()");
  const bool amx_layout = packed.size(2) == 2 * kPanelCols;
  const int64_t k = packed_in_features(packed), panels = packed.size(0);
  TORCH_CHECK(x.size(-1) == k, "bf16_linear: x has ", x.size(-1), " features, the weight expects ", k);
  TORCH_CHECK(n <= panels * kPanelCols && n > (panels - 1) * kPanelCols, "bf16_linear: n does not match the packed weight");
  auto x2 = x.reshape({-1, k}).contiguous();
  const int64_t m = x2.size(0);
  auto sizes = x.sizes().vec();
  sizes.back() = n;
  auto y = torch::empty({m, n}, x.options());
  const float* xp = x2.data_ptr<float>();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  torch::Tensor res2;
  const float* rp = nullptr;  // y = residual + x @ W.T: the sum a residual connection makes, stored once
  if (residual.has_value() && residual->defined()) {
    TORCH_CHECK(residual->scalar_type() == torch::kFloat32 && residual->numel() == m * n, "bf16_linear: residual must be float32 like the output");
    res2 = residual->reshape({m, n}).contiguous();
    rp = res2.data_ptr<float>();
  }
  if (m == 0) {
    // no rows: nothing to compute (the few-rows kernels below would read a row that is not there)
  } else if (amx_layout) {
    bf16_linear_amx(xp, m, wp, k, panels, yp, n, rp);  // bf16_linear_amx.cpp
  } else if (bf16_linear_avx512(xp, m, wp, k, panels, yp, n, rp)) {
    // AVX512: bf16_linear_avx512.cpp, the same chains (false where the CPU has no AVX512F)
  } else if (m == 1) {
    // One row: four panels at a time, so eight independent accumulator chains hide the FMA latency. Two blocks a
    // task at least: with more, the model's 576-column matrices (9 blocks) ran on one core of two.
    at::parallel_for(0, (panels + 3) / 4, 2, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t p = 4 * b;
        if (p + 4 <= panels) {
          kernel<1, 4>(xp, k, wp, k, p, yp, n, n, rp);
        } else {
          for (int64_t q = p; q < panels; ++q) kernel<1, 1>(xp, k, wp, k, q, yp, n, n, rp);
        }
      }
    });
  } else if (m < kRows) {
    // A few rows (a short verify): weights widened on the fly, as for one row.
    at::parallel_for(0, panels, 4, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) rows_kernel<kRows - 1>(m, xp, wp, k, p, yp, n, rp);
    });
  } else {
    // Rows packed k-major in blocks of six, so a block's six values for one k are adjacent. The rows past the last
    // whole block (a batch of 16: 6 + 6 + 4) run the few-rows kernel on the bf16 panel, the same chains, rather than
    // a block of six padded with zeros.
    const int64_t blocks = m / kRows, rest = m - blocks * kRows;
    auto xpack = x2.narrow(0, 0, blocks * kRows).view({blocks, kRows, k}).transpose(1, 2).contiguous();  // [blocks, K, 6]
    const float* xq = xpack.data_ptr<float>();
    at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
      std::vector<float> wide(k * kPanelCols);
      for (int64_t p = p0; p < p1; ++p) {
        const uint16_t* src = wp + p * k * kPanelCols;
        for (int64_t i = 0; i < k * kPanelCols; i += 8) _mm256_storeu_ps(wide.data() + i, widen8(src + i));
        for (int64_t b = 0; b < blocks; ++b)
          kernel_wide(xq + b * k * kRows, wide.data(), k, p, yp + b * kRows * n, n, n, rp ? rp + b * kRows * n : nullptr);
        if (rest)
          rows_kernel<kRows - 1>(rest, xp + blocks * kRows * k, wp, k, p, yp + blocks * kRows * n, n,
                                 rp ? rp + blocks * kRows * n : nullptr);
      }
    });
  }
  TORCH_CHECK(!(rp && bias.has_value() && bias->defined()), "bf16_linear: a bias and a residual together are not supported");
  if (bias.has_value() && bias->defined()) y.add_(*bias);
  return y.view(sizes);
}
