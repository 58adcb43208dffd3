// Attention of a few query rows (a decode step, a verify of a draft chain or tree) over a long KV cache.
//
// Why: ATen's CPU flash attention is built for long queries; for the 3-100 rows of a decode or verify step
// it spends most of its time outside the arithmetic (about 0.4 ms a layer at 1,200 cached tokens here).
// This kernel reads each key and value once per (row, head) block and is bound by that read.
//
// Each row is computed alone, over fixed 256-key chunks merged in order (a softmax per chunk, rescaled by
// the chunks' maxima), so a row's result depends only on its query, its mask and the cache: not on the other
// rows in the call, nor on the batch, nor on the thread count. Masked keys (-inf) are skipped.
#include "attention.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <vector>

#include "vec_math.h"

namespace {

constexpr int64_t kChunk = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The eight lanes' sums of eight vectors, as one vector: lane i = ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)) of
// vector i, the same additions for every lane, so a key's score does not depend on its place in the group.
inline __m256 sum8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// One (batch, head, chunk): every row's partial softmax over keys [j0, j1), one row at a time.
void chunk_partials(const AttentionChunk& c, AttentionPartial* partials, float* out, std::vector<float>& scores, const float* zeros) {
  const float *q = c.q, *k = c.k, *v = c.v, *mask = c.mask;
  const int64_t rows = c.rows, kv_stride = c.kv_stride, mask_row_stride = c.mask_row_stride, j0 = c.j0, j1 = c.j1, d = c.d;
  const float scale = c.scale;
  const int64_t n = j1 - j0, groups = (n + 7) / 8, vecs = d / 8;
  scores.resize(groups * 8);
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * d;
    const float* mr = mask + r * mask_row_stride + j0;
    // scores, eight keys at a time (a short last group reads zero keys, then masked)
    for (int64_t g = 0; g < groups; ++g) {
      const float* key[8];
      for (int i = 0; i < 8; ++i) key[i] = 8 * g + i < n ? k + (j0 + 8 * g + i) * kv_stride : zeros;
      __m256 acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
      for (int64_t x = 0; x < vecs; ++x) {
        const __m256 qv = _mm256_loadu_ps(qr + 8 * x);
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(key[i] + 8 * x), acc[i]);
      }
      _mm256_storeu_ps(&scores[8 * g], _mm256_mul_ps(sum8(acc), scale_v));
    }
    float m = kNegInf;
    for (int64_t j = 0; j < groups * 8; ++j) {
      scores[j] = j < n ? scores[j] + mr[j] : kNegInf;
      m = std::max(m, scores[j]);
    }
    float* o = out + r * d;
    partials[r].max = m;
    if (m == kNegInf) {  // every key of this chunk masked for this row
      for (int64_t x = 0; x < d; ++x) o[x] = 0.f;
      continue;
    }
    const __m256 mv = _mm256_set1_ps(m);
    __m256 total = _mm256_setzero_ps();
    for (int64_t j = 0; j < groups * 8; j += 8) {
      const __m256 p = vec::exp8(_mm256_sub_ps(_mm256_loadu_ps(&scores[j]), mv));
      _mm256_storeu_ps(&scores[j], p);
      total = _mm256_add_ps(total, p);
    }
    partials[r].sum = vec::hsum(total);
    __m256 acc[16];  // d <= 128
    for (int64_t x = 0; x < vecs; ++x) acc[x] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      if (scores[j] == 0.f) continue;  // masked (or underflowed) keys add nothing
      const __m256 p = _mm256_set1_ps(scores[j]);
      const float* vj = v + (j0 + j) * kv_stride;
      for (int64_t x = 0; x < vecs; ++x) acc[x] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * x), acc[x]);
    }
    for (int64_t x = 0; x < vecs; ++x) _mm256_storeu_ps(o + 8 * x, acc[x]);
  }
}

}  // namespace

torch::Tensor cached_attention(torch::Tensor query, torch::Tensor keys, torch::Tensor values, torch::Tensor mask) {
  TORCH_CHECK(query.scalar_type() == torch::kFloat32 && keys.scalar_type() == torch::kFloat32 && values.scalar_type() == torch::kFloat32 &&
                  mask.scalar_type() == torch::kFloat32,
              "cached_attention: float32 tensors only");
  TORCH_CHECK(query.dim() == 4 && keys.dim() == 4 && values.dim() == 4 && mask.dim() == 4, "cached_attention: 4-D tensors");
  const int64_t bsz = query.size(0), heads = query.size(1), rows = query.size(2), d = query.size(3), length = keys.size(2);
  TORCH_CHECK(d % 8 == 0 && d <= 128, "cached_attention: head_dim must be a multiple of 8, at most 128");
  TORCH_CHECK(keys.stride(3) == 1 && values.stride(3) == 1 && keys.stride(2) == values.stride(2), "cached_attention: keys/values layout");
  TORCH_CHECK(mask.size(2) == rows && mask.size(3) == length, "cached_attention: mask must be [batch, 1, rows, length]");
  query = query.contiguous();
  mask = mask.contiguous();
  const int64_t chunks = (length + kChunk - 1) / kChunk;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto partial_out = torch::empty({bsz, heads, chunks, rows, d}, query.options());
  std::vector<AttentionPartial> partials(bsz * heads * chunks * rows);
  const float *qp = query.data_ptr<float>(), *kp = keys.data_ptr<float>(), *vp = values.data_ptr<float>(), *mp = mask.data_ptr<float>();
  float* pp = partial_out.data_ptr<float>();
  // Work unit t = (batch, head, chunk of keys).
  const auto chunk_at = [&](int64_t t) {
    const int64_t b = t / (heads * chunks), h = (t / chunks) % heads, c = t % chunks;
    const int64_t j0 = c * kChunk, j1 = std::min(length, j0 + kChunk);
    return AttentionChunk{qp + (b * heads + h) * rows * d, rows, kp + b * keys.stride(0) + h * keys.stride(1),
                          vp + b * values.stride(0) + h * values.stride(1), keys.stride(2), mp + b * mask.stride(0),
                          mask.stride(2), j0, j1, d, scale};
  };
  at::parallel_for(0, bsz * heads * chunks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scores;
    const std::vector<float> zeros(d, 0.f);
    for (int64_t t = t0; t < t1; ++t) {
      AttentionChunk chunk = chunk_at(t);
      if (t + 1 < t1) {  // this thread's next unit, for the AVX512 kernel's prefetch
        const AttentionChunk next = chunk_at(t + 1);
        chunk.next_k = next.k + next.j0 * next.kv_stride;
        chunk.next_v = next.v + next.j0 * next.kv_stride;
        chunk.next_n = next.j1 - next.j0;
      }
      if (!chunk_partials_avx512(chunk, &partials[t * rows], pp + t * rows * d, scores))
        chunk_partials(chunk, &partials[t * rows], pp + t * rows * d, scores, zeros.data());
    }
  });
  // Merge each row's chunks in order.
  auto out = torch::empty({bsz, heads, rows, d}, query.options());
  float* op = out.data_ptr<float>();
  at::parallel_for(0, bsz * heads * rows, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t bh = i / rows, r = i % rows;
      float m = kNegInf;
      for (int64_t c = 0; c < chunks; ++c) m = std::max(m, partials[(bh * chunks + c) * rows + r].max);
      float* o = op + i * d;
      for (int64_t x = 0; x < d; ++x) o[x] = 0.f;
      if (m == kNegInf) continue;
      float total = 0.f;
      for (int64_t c = 0; c < chunks; ++c) {
        const AttentionPartial& part = partials[(bh * chunks + c) * rows + r];
        if (part.max == kNegInf) continue;
        const float w = std::exp(part.max - m);
        total += w * part.sum;
        const float* src = pp + ((bh * chunks + c) * rows + r) * d;
        for (int64_t x = 0; x < d; ++x) o[x] += w * src[x];
      }
      for (int64_t x = 0; x < d; ++x) o[x] /= total;
    }
  });
  return out;
}
