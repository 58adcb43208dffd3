// cached_attention over a bf16 KV cache on the AMX tiles: the scores and the weighted sum of values as tile products.
//
// Why: with fp32 keys and values the AVX512 kernel is bound by its multiply-adds once a verify gives a KV head more
// than a few query rows (q = 4 on a 9/3-head model: 12 rows, each key and value multiplied 12 times), so a 4-token
// verify costs more than one token's forward for its attention alone. The tiles multiply bf16 pairs at about sixteen
// times the FMA rate; with keys and values stored in bf16 (half the bytes to read, too) the products are exact once
// the fp32 operand is split into three bf16 parts (amx_split_planes: x = hi + mid + lo), as the AMX linear does.
// So: scores = Q K^T with Q's three planes against keys in the tiles' pair layout, and out = P V with the
// probabilities' three planes against values paired key by key. Every product is exact; the tile unit sums them in
// fp32 (its own rounding, fixed: a row's sums never depend on the other rows in the tile, their number, the batch
// or the threads).
//
// Each row's arithmetic: scores by tiles over the head dimension (two 32-wide blocks for d = 64), scaled and masked
// in fp32, the softmax over the same fixed 256-key chunks as the fp32 kernels (attention.cpp), then the values'
// sum by tiles over the chunk's keys in 32-key blocks. Keys a row may not see have probability exactly 0, so their
// products add exact zeros: a verify's row gives bit for bit what a one-token forward at its position gives.
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention.h"
#include "bf16_linear.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BW__)

#include "vec_math.h"

namespace {

constexpr int64_t kTileRows = 16;
constexpr int64_t kKeyBlock = 32;  // keys per value tile (16 pairs); chunks are padded to a multiple of it
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The next chunk's keys and values, fetched into L2 a few lines per tile product so that the memory reads overlap
// the tiles' arithmetic (without it a thread waits on memory at each chunk's start and leaves the bus idle while the
// tiles work).
class NextChunk {
 public:
  NextChunk(const AttentionChunkBf16& c, int64_t steps) {
    if (!c.next_k || c.kv_stride != c.d) return;  // contiguous keys (and values): one byte range each
    k_ = reinterpret_cast<const char*>(c.next_k);
    v_ = reinterpret_cast<const char*>(c.next_v);
    end_ = c.next_n * c.d * 2;
    per_step_ = std::max<int64_t>(1, (end_ / 64 + steps - 1) / std::max<int64_t>(1, steps));
  }
  inline void step() {
    for (int64_t i = 0; i < per_step_ && at_ < end_; ++i, at_ += 64) {
      _mm_prefetch(k_ + at_, _MM_HINT_T1);
      _mm_prefetch(v_ + at_, _MM_HINT_T1);
    }
  }

 private:
  const char *k_ = nullptr, *v_ = nullptr;
  int64_t end_ = 0, per_step_ = 0, at_ = 0;
};

// The chunk's keys as right-hand tiles of the scores: tile (g, b) = keys 16g..16g+15 against head dims 32b..32b+31,
// row p holding dword 16b + p (dims 32b + 2p, +1) of each of the 16 keys. Keys from n on are zero.
// While it runs, the chunk's values are fetched into L2 and the keys two groups ahead into L1.
void key_tiles(const uint16_t* k, const uint16_t* v, int64_t kv_stride, int64_t n, int64_t padded, int64_t d, uint16_t* kt) {
  const int64_t blocks = d / kKeyBlock;
  for (int64_t g = 0; g < padded / 16; ++g) {
    for (int64_t j = g * 16; j < std::min(n, g * 16 + 16); ++j)
      for (int64_t e = 0; e < d; e += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(v + j * kv_stride + e), _MM_HINT_T1);
        if (j + 32 < n) _mm_prefetch(reinterpret_cast<const char*>(k + (j + 32) * kv_stride + e), _MM_HINT_T0);
      }
    for (int64_t b = 0; b < blocks; ++b) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t j = g * 16 + i;
        r[i] = j < n ? _mm512_loadu_ps(k + j * kv_stride + b * kKeyBlock) : _mm512_setzero_ps();
      }
      vec::transpose16(r);
      uint16_t* tile = kt + (g * blocks + b) * 512;
      for (int p = 0; p < 16; ++p) _mm512_storeu_ps(tile + p * 32, r[p]);
    }
  }
}

// The chunk's values as right-hand tiles of the output: tile (c, b) = keys 32c..32c+31 against head dims
// 16b..16b+15, row p holding values of keys 32c + 2p and 32c + 2p + 1 side by side for each dim. Keys from n on are
// zero (a zero probability times garbage could be NaN).
void value_tiles(const uint16_t* v, int64_t kv_stride, int64_t n, int64_t padded, int64_t d, uint16_t* vt) {
  alignas(64) uint16_t pick[2][32];
  for (int i = 0; i < 32; ++i) {
    pick[0][i] = static_cast<uint16_t>((i & 1 ? 32 : 0) + i / 2);
    pick[1][i] = static_cast<uint16_t>((i & 1 ? 32 : 0) + 16 + i / 2);
  }
  const __m512i lo = _mm512_load_si512(pick[0]), hi = _mm512_load_si512(pick[1]);
  const int64_t col_tiles = d / 16;
  for (int64_t c = 0; c < padded / kKeyBlock; ++c)
    for (int64_t p = 0; p < 16; ++p) {
      const int64_t j = c * kKeyBlock + 2 * p;
      for (int64_t h = 0; h < d / 32; ++h) {  // 32 dims of both keys -> rows of two tiles
        const __m512i a = j < n ? _mm512_loadu_si512(v + j * kv_stride + h * 32) : _mm512_setzero_si512();
        const __m512i b = j + 1 < n ? _mm512_loadu_si512(v + (j + 1) * kv_stride + h * 32) : _mm512_setzero_si512();
        uint16_t* tile = vt + (c * col_tiles + 2 * h) * 512 + p * 32;
        _mm512_storeu_si512(tile, _mm512_permutex2var_epi16(a, lo, b));
        _mm512_storeu_si512(tile + 512, _mm512_permutex2var_epi16(a, hi, b));
      }
    }
}

// Tile roles: accumulators 0-3; left operands 4 and 5 and right operands 6 and 7, each pair taking turns, so that
// consecutive products write different accumulators and a tile is reloaded only two products after its last use
// (the tiles are not renamed: one left and one right tile made every product wait for the one before, about three
// times slower).
//
// out[:, 16t..16t+15] = sum over k-blocks of left(kb) x right(t, kb), for T right tiles (T <= 4), stored with row
// stride ldo floats. left(kb): a [rows, 32] bf16 block with row stride lda elements.
template <int T, class Left, class Right>
void tile_products(Left left, int64_t lda, int64_t kblocks, Right right, float* out, int64_t ldo, NextChunk& next) {
  _tile_zero(0);
  if constexpr (T > 1) _tile_zero(1);
  if constexpr (T > 2) _tile_zero(2);
  if constexpr (T > 3) _tile_zero(3);
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const bool odd = kb & 1;
    if (odd) _tile_loadd(5, left(kb), lda * 2);
    else _tile_loadd(4, left(kb), lda * 2);
    next.step();
#define SPECULAB_TILE(N, B)                                        \
  if constexpr (T > N) {                                           \
    _tile_loadd(B, right(N, kb), 64);                              \
    if (odd) _tile_dpbf16ps(N, 5, B);                              \
    else _tile_dpbf16ps(N, 4, B);                                  \
  }
    SPECULAB_TILE(0, 6)
    SPECULAB_TILE(1, 7)
    SPECULAB_TILE(2, 6)
    SPECULAB_TILE(3, 7)
#undef SPECULAB_TILE
  }
  _tile_stored(0, out, ldo * 4);
  if constexpr (T > 1) _tile_stored(1, out + 16, ldo * 4);
  if constexpr (T > 2) _tile_stored(2, out + 32, ldo * 4);
  if constexpr (T > 3) _tile_stored(3, out + 48, ldo * 4);
}

// cols right tiles against one block of left rows: in runs of 4, the rest 2 or 1 at a time.
template <class Left, class RightAt>
void tile_row(Left left, int64_t lda, int64_t kblocks, int64_t cols, RightAt right_at, float* out, int64_t ldo, NextChunk& next) {
  for (int64_t t0 = 0; t0 < cols;) {
    const int64_t n = cols - t0;
    const auto right = [&](int t, int64_t kb) { return right_at(t0 + t, kb); };
    if (n >= 4) tile_products<4>(left, lda, kblocks, right, out + t0 * 16, ldo, next), t0 += 4;
    else if (n >= 2) tile_products<2>(left, lda, kblocks, right, out + t0 * 16, ldo, next), t0 += 2;
    else tile_products<1>(left, lda, kblocks, right, out + t0 * 16, ldo, next), t0 += 1;
  }
}

// Every stacked row's products with the right tiles: left [stacked, width] bf16 in blocks of `block` rows.
template <class RightAt>
void stacked_products(const uint16_t* left, int64_t stacked, int64_t block, int64_t width, int64_t cols, RightAt right_at, float* out,
                      int64_t ldo, NextChunk& next) {
  for (int64_t r0 = 0; r0 < stacked; r0 += block) {
    const uint16_t* rows = left + r0 * width;
    tile_row([&](int64_t kb) { return rows + kb * kKeyBlock; }, width, width / kKeyBlock, cols, right_at, out + r0 * ldo, ldo, next);
  }
}

// Row r's three planes' sums (stacked rows r, R + r, 2R + r) as one, smallest first: (lo + mid) + hi.
inline __m512 planes_sum(const float* x, int64_t plane_stride, int64_t j) {
  return _mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(x + 2 * plane_stride + j), _mm512_loadu_ps(x + plane_stride + j)), _mm512_loadu_ps(x + j));
}

// Row r's probabilities over the chunk into p: exp(scale * score + mask - max), zero from n to padded. s: the row's
// hi plane's sums, its mid and lo planes' plane_stride and 2 * plane_stride floats on.
void softmax_row(const float* s, int64_t plane_stride, const float* mask, float scale, int64_t n, int64_t padded, float* p,
                 AttentionPartial& part) {
  __m512 mx = _mm512_set1_ps(kNegInf);
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < padded; j += 16) {
    const __mmask16 live = j + 16 <= n ? __mmask16(0xFFFF) : j >= n ? __mmask16(0) : __mmask16((1u << (n - j)) - 1);
    const __m512 v = _mm512_mask_add_ps(_mm512_set1_ps(kNegInf), live, _mm512_mul_ps(planes_sum(s, plane_stride, j), sc),
                                        _mm512_maskz_loadu_ps(live, mask + j));
    _mm512_storeu_ps(p + j, v);
    mx = _mm512_max_ps(mx, v);
  }
  part.max = _mm512_reduce_max_ps(mx);
  __m512 total = _mm512_setzero_ps();
  const __m512 m = _mm512_set1_ps(part.max == kNegInf ? 0.f : part.max);
  for (int64_t j = 0; j < padded; j += 16) {
    const __m512 e = vec::exp16(_mm512_sub_ps(_mm512_loadu_ps(p + j), m));  // exp(-inf) = 0
    _mm512_storeu_ps(p + j, e);
    total = _mm512_add_ps(total, e);
  }
  part.sum = _mm512_reduce_add_ps(total);
}

// A thread's buffer, reused from chunk to chunk, its start on a 64-byte line: a tile row or a vector that straddles
// two lines costs two accesses.
template <class T>
class Aligned {
 public:
  T* get(int64_t n) {
    store_.resize(n + 64 / sizeof(T));
    const auto at = reinterpret_cast<uintptr_t>(store_.data());
    return reinterpret_cast<T*>((at + 63) & ~uintptr_t(63));
  }

 private:
  std::vector<T> store_;
};

struct Scratch {
  Aligned<uint16_t> kt, vt, probs;
  Aligned<float> scores, p, out;
};

}  // namespace

bool chunk_partials_amx(const AttentionChunkBf16& c, AttentionPartial* partials, float* out) {
  thread_local Scratch s;
  const int64_t n = c.j1 - c.j0, padded = (n + kKeyBlock - 1) / kKeyBlock * kKeyBlock, d = c.d, rows = c.rows, stacked = c.stacked;
  const int64_t block = std::min<int64_t>(stacked, kTileRows);
  uint16_t *kt = s.kt.get(padded * d), *vt = s.vt.get(padded * d), *probs = s.probs.get(stacked * padded);
  float *scores = s.scores.get(stacked * padded), *p = s.p.get(rows * padded), *sums = s.out.get(stacked * d);
  key_tiles(c.k + c.j0 * c.kv_stride, c.v + c.j0 * c.kv_stride, c.kv_stride, n, padded, d, kt);
  const int64_t kblocks = d / kKeyBlock, col_tiles = d / 16, row_blocks = stacked / block;
  // one step per left tile loaded: (key groups in runs of 4) x k-blocks, then (column tiles in runs of 4) x key blocks
  NextChunk next(c, row_blocks * ((padded / 16 + 3) / 4 * kblocks + (col_tiles + 3) / 4 * (padded / kKeyBlock)));
  stacked_products(c.q_stacked, stacked, block, d, padded / 16, [&](int64_t g, int64_t kb) { return kt + (g * kblocks + kb) * 512; },
                   scores, padded, next);
  for (int64_t r = 0; r < rows; ++r)
    softmax_row(scores + r * padded, rows * padded, c.mask + r * c.mask_row_stride + c.j0, c.scale, n, padded,
                p + r * padded, partials[r]);
  value_tiles(c.v + c.j0 * c.kv_stride, c.kv_stride, n, padded, d, vt);
  amx_split_planes(p, rows, padded, rows, probs);  // [3 * rows, padded]: stacked like the queries
  std::fill(probs + 3 * rows * padded, probs + stacked * padded, uint16_t(0));
  stacked_products(probs, stacked, block, padded, col_tiles, [&](int64_t t, int64_t kb) { return vt + (kb * col_tiles + t) * 512; },
                   sums, d, next);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < d; e += 16) _mm512_storeu_ps(out + r * d + e, planes_sum(sums + r * d, rows * d, e));
  return true;
}

bool attention_amx_available(int64_t d) { return amx_in_use() && d % 32 == 0 && d <= 128; }
void amx_release() { _tile_release(); }

#else

bool chunk_partials_amx(const AttentionChunkBf16&, AttentionPartial*, float*) { return false; }
bool attention_amx_available(int64_t) { return false; }
void amx_release() {}

#endif
