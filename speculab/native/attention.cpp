// Attention of a few query rows (a decode step, a verify of a draft chain or tree) over a long KV cache.
//
// Why: ATen's CPU flash attention is built for long queries; for the 3-100 rows of a decode or verify step
// it spends most of its time outside the arithmetic (about 0.4 ms a layer at 1,200 cached tokens here).
//
// The work is split into units (batch, KV head, fixed 256-key chunk), so that both cores share even one long
// sequence (the split-KV of flash-decoding); each unit computes every query row's partial softmax over its chunk
// (attention_avx512.cpp, attention_avx2.cpp, attention_amx.cpp), and the chunks are merged in order, rescaled by
// their maxima. A row's result depends only on its query, its mask and the cache: not on the other rows in the
// call, nor on the batch, nor on the thread count.
#include "attention.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "bf16_linear.h"

namespace {

constexpr int64_t kChunk = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The work of one call: units t = (batch, head, chunk of keys), each row's partial softmax and output per unit.
struct Units {
  int64_t bsz, heads, rows, d, length, chunks;
  float scale;
  std::vector<AttentionPartial> partials;  // [bsz * heads * chunks * rows]
  torch::Tensor out;                      // [bsz, heads, chunks, rows, d] unnormalised
  int64_t b(int64_t t) const { return t / (heads * chunks); }
  int64_t h(int64_t t) const { return (t / chunks) % heads; }
  int64_t j0(int64_t t) const { return (t % chunks) * kChunk; }
  int64_t j1(int64_t t) const { return std::min(length, j0(t) + kChunk); }
};

void fp32_units(Units& u, const torch::Tensor& query, const torch::Tensor& keys, const torch::Tensor& values, const torch::Tensor& mask) {
  const float *qp = query.data_ptr<float>(), *kp = keys.data_ptr<float>(), *vp = values.data_ptr<float>(), *mp = mask.data_ptr<float>();
  float* pp = u.out.data_ptr<float>();
  const int64_t rows = u.rows, d = u.d;
  const auto chunk_at = [&](int64_t t) {
    return AttentionChunk{qp + (u.b(t) * u.heads + u.h(t)) * rows * d, rows, kp + u.b(t) * keys.stride(0) + u.h(t) * keys.stride(1),
                          vp + u.b(t) * values.stride(0) + u.h(t) * values.stride(1), keys.stride(2), mp + u.b(t) * mask.stride(0),
                          mask.stride(2), u.j0(t), u.j1(t), d, u.scale};
  };
  at::parallel_for(0, u.bsz * u.heads * u.chunks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scores;
    for (int64_t t = t0; t < t1; ++t) {
      AttentionChunk chunk = chunk_at(t);
      if (t + 1 < t1) {  // this thread's next unit, fetched during this one's arithmetic
        const AttentionChunk next = chunk_at(t + 1);
        chunk.next_k = next.k + next.j0 * next.kv_stride;
        chunk.next_v = next.v + next.j0 * next.kv_stride;
        chunk.next_n = next.j1 - next.j0;
      }
      if (!chunk_partials_avx512(chunk, &u.partials[t * rows], pp + t * rows * d, scores))
        chunk_partials_avx2(chunk, &u.partials[t * rows], pp + t * rows * d, scores);
    }
  });
}

// A bf16 cache on the tiles: each (batch, head)'s queries split into three stacked bf16 planes once, then the units.
void bf16_units(Units& u, const torch::Tensor& query, const torch::Tensor& keys, const torch::Tensor& values, const torch::Tensor& mask) {
  const int64_t rows = u.rows, d = u.d, block = std::min<int64_t>(3 * rows, 16), stacked = (3 * rows + block - 1) / block * block;
  auto planes = torch::zeros({u.bsz * u.heads, stacked, d}, query.options().dtype(torch::kBFloat16));
  auto* qs = reinterpret_cast<uint16_t*>(planes.data_ptr());
  const float* qp = query.data_ptr<float>();
  at::parallel_for(0, u.bsz * u.heads, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) amx_split_planes(qp + i * rows * d, rows, d, rows, qs + i * stacked * d);
  });
  const auto *kp = reinterpret_cast<const uint16_t*>(keys.data_ptr()), *vp = reinterpret_cast<const uint16_t*>(values.data_ptr());
  const float* mp = mask.data_ptr<float>();
  float* pp = u.out.data_ptr<float>();
  at::parallel_for(0, u.bsz * u.heads * u.chunks, 1, [&](int64_t t0, int64_t t1) {
    amx_configure(block, 2);
    const auto chunk_at = [&](int64_t t) {
      return AttentionChunkBf16{qs + (u.b(t) * u.heads + u.h(t)) * stacked * d, rows, stacked,
                                kp + u.b(t) * keys.stride(0) + u.h(t) * keys.stride(1), vp + u.b(t) * values.stride(0) + u.h(t) * values.stride(1),
                                keys.stride(2), mp + u.b(t) * mask.stride(0), mask.stride(2), u.j0(t), u.j1(t), d, u.scale};
    };
    for (int64_t t = t0; t < t1; ++t) {
      AttentionChunkBf16 chunk = chunk_at(t);
      if (t + 1 < t1) {  // this thread's next unit, fetched during this one's tile products
        const AttentionChunkBf16 next = chunk_at(t + 1);
        chunk.next_k = next.k + next.j0 * next.kv_stride;
        chunk.next_v = next.v + next.j0 * next.kv_stride;
        chunk.next_n = next.j1 - next.j0;
      }
      chunk_partials_amx(chunk, &u.partials[t * rows], pp + t * rows * d);
    }
    amx_release();
  });
}

// Each row's chunks merged in order (rescaled by the chunks' maxima), then normalised.
torch::Tensor merge_units(const Units& u, const torch::TensorOptions& options) {
  const int64_t rows = u.rows, d = u.d, chunks = u.chunks;
  auto out = torch::empty({u.bsz, u.heads, rows, d}, options);
  float* op = out.data_ptr<float>();
  const float* pp = u.out.data_ptr<float>();
  at::parallel_for(0, u.bsz * u.heads * rows, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t bh = i / rows, r = i % rows;
      float m = kNegInf;
      for (int64_t c = 0; c < chunks; ++c) m = std::max(m, u.partials[(bh * chunks + c) * rows + r].max);
      float* o = op + i * d;
      for (int64_t x = 0; x < d; ++x) o[x] = 0.f;
      if (m == kNegInf) continue;
      float total = 0.f;
      for (int64_t c = 0; c < chunks; ++c) {
        const AttentionPartial& part = u.partials[(bh * chunks + c) * rows + r];
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

}  // namespace

torch::Tensor cached_attention(torch::Tensor query, torch::Tensor keys, torch::Tensor values, torch::Tensor mask) {
  const auto cache_dtype = keys.scalar_type();
  TORCH_CHECK(query.scalar_type() == torch::kFloat32 && mask.scalar_type() == torch::kFloat32, "cached_attention: float32 queries and mask");
  TORCH_CHECK((cache_dtype == torch::kFloat32 || cache_dtype == torch::kBFloat16) && values.scalar_type() == cache_dtype,
              "cached_attention: keys and values both float32 or both bfloat16");
  TORCH_CHECK(query.dim() == 4 && keys.dim() == 4 && values.dim() == 4 && mask.dim() == 4, "cached_attention: 4-D tensors");
  const int64_t bsz = query.size(0), heads = query.size(1), rows = query.size(2), d = query.size(3), length = keys.size(2);
  TORCH_CHECK(d % 8 == 0 && d <= 128, "cached_attention: head_dim must be a multiple of 8, at most 128");
  TORCH_CHECK(keys.stride(3) == 1 && values.stride(3) == 1 && keys.stride(2) == values.stride(2), "cached_attention: keys/values layout");
  TORCH_CHECK(mask.size(2) == rows && mask.size(3) == length, "cached_attention: mask must be [batch, 1, rows, length]");
  const bool tiles = cache_dtype == torch::kBFloat16 && attention_amx_available(d);
  if (cache_dtype == torch::kBFloat16 && !tiles)  // widening is exact: the fp32 kernels' results for these values
    return cached_attention(query, keys.to(torch::kFloat32), values.to(torch::kFloat32), mask);
  query = query.contiguous();
  mask = mask.contiguous();
  const int64_t chunks = (length + kChunk - 1) / kChunk;
  Units u{bsz, heads, rows, d, length, chunks, 1.0f / std::sqrt(static_cast<float>(d)),
          std::vector<AttentionPartial>(bsz * heads * chunks * rows), torch::empty({bsz, heads, chunks, rows, d}, query.options())};
  if (tiles) bf16_units(u, query, keys, values, mask);
  else fp32_units(u, query, keys, values, mask);
  return merge_units(u, query.options());
}
