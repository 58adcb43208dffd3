// bf16_linear's kernel for CPUs with AMX: the same fp32 product of fp32 activations and bf16 weights, on the tiles.
//
// Why: from 8 rows up the AVX512 kernel's FMAs no longer hide under the weight reads (8 rows cost 1.2-1.3x one row,
// 16 rows 2x; benchmarks/kernels_alone.py amx-probe). AMX multiplies bf16 pairs at about sixteen times the FMA
// rate, enough to do the fp32 product three times over and still wait on memory at 16 rows (gate|up: 1.18x one row,
// not 1.9x). The price: one row streams its weights 3-8% slower than the FMA kernel (see kPrefetchBlocks for what
// was tried).
//
// How it stays an fp32 product: each activation is split exactly into three bf16 numbers, x = hi + mid + lo (hi
// is x with its low 16 bits cleared, mid the same of x - hi, lo = x - hi - mid has at most 8 significant bits), and
// a weight is a bf16 number, so every product hi*w, mid*w, lo*w is exact in fp32; the tile unit sums each 32-k
// block's products into the fp32 accumulator (more precisely than an FMA chain: the largest error against a float64
// product is a quarter of the chain's on the model's shapes). Its rounding is its own: no order of fp32 FMAs gives
// the same bits (tested on this CPU), so a weight's kernel is fixed when it is packed (by its layout), never chosen
// per call by the row count: that would break a verify's bit-identity with one-token forwards.
//
// A row's result never depends on the other rows: each row of a tile product is its own sum, over the same
// k-blocks in the same order whatever the number of rows, so a q-token verify gives bit for bit what q one-token
// forwards give on this kernel.
//
// Layout (amx_pack): W [N, K] with K a multiple of 32, as panels of 16 output columns, each [K/2, 16, 2]: row j
// of a panel holds, for its 16 columns, the weights of k = 2j and 2j + 1 side by side (the tiles' pair layout),
// so a 32-k block of a panel is one contiguous 1 KiB tile.
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bf16_linear.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {
bool amx_on = true;
}  // namespace

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)

namespace {

constexpr int64_t kCols = 16;    // a panel: one tile's 16 fp32 columns
constexpr int64_t kBlockK = 32;  // k per tile: 16 rows of bf16 pairs
constexpr int64_t kTileRows = 16;
constexpr int64_t kGroup = 4;    // panels per pass: accumulators in tiles 0-3, x's three parts in 4-6, weights in 7
// Each panel's weights are fetched into L1 two tiles (2 KiB) ahead. Measured on the gate|up and down shapes: 1 and 3-4
// tiles ahead were within 2%, 6-8 ahead 5-15% slower, none 20% slower; fetching into L2 as well, further ahead (the
// same panel or the next group's), 5-20% slower; the group's four panels interleaved into one stream 10-18% slower;
// three panels a pass with two weight tiles taking turns, no better (BENCHMARKS.md, "Verify cost").
constexpr int64_t kPrefetchBlocks = 2;

// Linux hands a process the tile registers only on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
bool tiles_granted() {
  static const bool granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return granted;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

void amx_configure(int64_t rows, int right_tiles) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = t >= 8 - right_tiles ? kTileRows : rows;
  }
  // GCC 12 does not see ldtilecfg read its operand and drops the stores above (dead-store elimination; the bug
  // llama.cpp works around with -fno-tree-dse): a compiler barrier keeps them.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

void amx_split_planes(const float* x, int64_t m, int64_t k, int64_t padded, uint16_t* out) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  std::fill(out + m * k, out + padded * k, uint16_t(0));
  std::fill(out + (padded + m) * k, out + 2 * padded * k, uint16_t(0));
  std::fill(out + (2 * padded + m) * k, out + 3 * padded * k, uint16_t(0));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + r * k + i);
      const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), high));
      const __m512 rest = _mm512_sub_ps(v, hi);
      const __m512 mid = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rest), high));
      const __m512 parts[3] = {hi, mid, _mm512_sub_ps(rest, mid)};
      for (int s = 0; s < 3; ++s) {
        const __m256i top = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(parts[s]), 16));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (s * padded + r) * k + i), top);
      }
    }
}

namespace {

// Panel T's weight tile for this k-block into tile 7, the next-but-one block's lines fetched meanwhile; its three
// products (hi, mid, lo) into accumulator T.
#define SPECULAB_AMX_PANEL(T)                                                                       \
  if constexpr (P > T) {                                                                            \
    const uint16_t* tile = w + (p0 + T) * k * kCols + kb * kBlockK * kCols;                        \
    for (int line = 0; line < 16; ++line)                                                           \
      _mm_prefetch(reinterpret_cast<const char*>(tile + kPrefetchBlocks * kBlockK * kCols + 32 * line), _MM_HINT_T0); \
    _tile_loadd(7, tile, 64);                                                                       \
    _tile_dpbf16ps(T, 4, 7);                                                                        \
    _tile_dpbf16ps(T, 5, 7);                                                                        \
    _tile_dpbf16ps(T, 6, 7);                                                                        \
  }

// One tile of (configured) rows of the planes xs (plane stride `plane`) against panels p0..p0+P-1; the sums land
// in out [rows, P*16].
template <int P>
void group(const uint16_t* xs, int64_t plane, int64_t k, const uint16_t* w, int64_t p0, float* out) {
  _tile_zero(0);
  if constexpr (P > 1) _tile_zero(1);
  if constexpr (P > 2) _tile_zero(2);
  if constexpr (P > 3) _tile_zero(3);
  for (int64_t kb = 0; kb < k / kBlockK; ++kb) {
    _tile_loadd(4, xs + kb * kBlockK, k * 2);
    _tile_loadd(5, xs + plane + kb * kBlockK, k * 2);
    _tile_loadd(6, xs + 2 * plane + kb * kBlockK, k * 2);
    SPECULAB_AMX_PANEL(0)
    SPECULAB_AMX_PANEL(1)
    SPECULAB_AMX_PANEL(2)
    SPECULAB_AMX_PANEL(3)
  }
  const int64_t stride = P * kCols * 4;
  _tile_stored(0, out, stride);
  if constexpr (P > 1) _tile_stored(1, out + kCols, stride);
  if constexpr (P > 2) _tile_stored(2, out + 2 * kCols, stride);
  if constexpr (P > 3) _tile_stored(3, out + 3 * kCols, stride);
}
#undef SPECULAB_AMX_PANEL

// out [rows, width] into y (+ res), panels from p0, columns below n.
void store(const float* out, int64_t width, int64_t rows, int64_t p0, float* y, int64_t n, const float* res) {
  const int64_t col = p0 * kCols, cols = std::min(width, n - col);
  for (int64_t c = 0; c < cols; c += kCols) {
    const int64_t left = std::min<int64_t>(kCols, cols - c);
    const __mmask16 keep = left == kCols ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    for (int64_t r = 0; r < rows; ++r) {
      __m512 v = _mm512_loadu_ps(out + r * width + c);
      if (res) v = _mm512_add_ps(_mm512_maskz_loadu_ps(keep, res + r * n + col + c), v);
      _mm512_mask_storeu_ps(y + r * n + col + c, keep, v);
    }
  }
}

// P (1, 2 or 4) panels from p0 against one tile of rows.
void run_group(int64_t P, const uint16_t* xs, int64_t plane, int64_t k, const uint16_t* w, int64_t p0, float* out) {
  if (P == 4) group<4>(xs, plane, k, w, p0, out);
  else if (P == 2) group<2>(xs, plane, k, w, p0, out);
  else group<1>(xs, plane, k, w, p0, out);
}

}  // namespace

bool amx_in_use() { return amx_on && tiles_granted(); }
bool amx_tiles_granted() { return tiles_granted(); }

void bf16_linear_amx(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t panels, float* y, int64_t n,
                     const float* res) {
  TORCH_CHECK(tiles_granted(), "bf16_linear: this process was refused the AMX tiles");
  TORCH_CHECK(k % kBlockK == 0, "bf16_linear: an AMX-packed weight needs a multiple of 32 input features");
  if (m == 0) return;
  // Rows in tiles of up to 16; every row's sums are made alone, in the same order, whatever the tile's height.
  const int64_t block = std::min(m, kTileRows), padded = (m + block - 1) / block * block;
  thread_local std::vector<uint16_t> buffer;  // reused, so a decode step allocates nothing
  buffer.resize(3 * padded * k);
  const uint16_t* xs = buffer.data();  // by pointer: in the workers, `buffer` names their own (empty) one
  amx_split_planes(x, m, k, padded, buffer.data());
  at::parallel_for(0, panels, 1, [&](int64_t t0, int64_t t1) {
    amx_configure(block, 1);
    alignas(64) float out[kTileRows * kGroup * kCols];
    for (int64_t p0 = t0; p0 < t1;) {
      const int64_t left = t1 - p0, P = left >= 4 ? 4 : left >= 2 ? 2 : 1;
      for (int64_t r0 = 0; r0 < m; r0 += block) {
        run_group(P, xs + r0 * k, padded * k, k, w, p0, out);
        store(out, P * kCols, std::min(block, m - r0), p0, y + r0 * n, n, res ? res + r0 * n : nullptr);
      }
      p0 += P;
    }
    _tile_release();
  });
}

torch::Tensor amx_pack(torch::Tensor w) {
  TORCH_CHECK(w.dim() == 2 && w.size(1) % kBlockK == 0, "amx_pack: weight must be 2-D with a multiple of 32 input features");
  const int64_t n = w.size(0), k = w.size(1), panels = (n + kCols - 1) / kCols;
  auto padded = torch::zeros({panels * kCols, k}, w.options().dtype(torch::kBFloat16));
  padded.narrow(0, 0, n).copy_(w);
  // [panels, 16 cols, K/2, 2] -> [panels, K/2, 16 cols, 2]
  return padded.view({panels, kCols, k / 2, 2}).transpose(1, 2).contiguous().view({panels, k / 2, 2 * kCols});
}

#else

bool amx_in_use() { return false; }
bool amx_tiles_granted() { return false; }
void amx_configure(int64_t, int) { TORCH_CHECK(false, "built without AMX"); }
void amx_split_planes(const float*, int64_t, int64_t, int64_t, uint16_t*) { TORCH_CHECK(false, "built without AMX"); }
void bf16_linear_amx(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, const float*) {
  TORCH_CHECK(false, "bf16_linear: built without AMX");
}
torch::Tensor amx_pack(torch::Tensor) { TORCH_CHECK(false, "amx_pack: built without AMX"); }

#endif

bool use_amx(bool on) {
  const bool before = amx_on;
  amx_on = on;
  return before;
}
