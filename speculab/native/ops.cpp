// The small operations of a decoder layer between its matmuls, one pass each over fp32 rows (AVX2 + FMA).
//
// Why: as ATen ops they cost a dispatch, an allocation and often a copy each (about 25 a layer, several
// milliseconds a token at this model's size); here RMSNorm is one pass, RoPE writes keys and values straight
// into the cache, and SiLU-times-up is one pass. Every row is computed alone, in a fixed order.
#include "ops.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>

#include "vec_math.h"

torch::Tensor rms_norm_rows(torch::Tensor x, torch::Tensor weight, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "rms_norm_rows: contiguous float32 rows");
  const int64_t hidden = x.size(-1), rows = x.numel() / hidden;
  TORCH_CHECK(hidden % 8 == 0, "rms_norm_rows: hidden size must be a multiple of 8");
  const bool scaled = weight.numel() > 0;
  TORCH_CHECK(!scaled || weight.numel() == hidden, "rms_norm_rows: weight must have hidden size entries");
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = scaled ? weight.data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xp + r * hidden;
      float* orow = op + r * hidden;
      __m256 ss = _mm256_setzero_ps();
      for (int64_t i = 0; i < hidden; i += 8) {
        const __m256 v = _mm256_loadu_ps(xr + i);
        ss = _mm256_fmadd_ps(v, v, ss);
      }
      const float inv = 1.0f / std::sqrt(vec::hsum(ss) / static_cast<float>(hidden) + static_cast<float>(eps));
      const __m256 iv = _mm256_set1_ps(inv);
      for (int64_t i = 0; i < hidden; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), iv);
        if (wp) v = _mm256_mul_ps(v, _mm256_loadu_ps(wp + i));
        _mm256_storeu_ps(orow + i, v);
      }
    }
  });
  return out;
}

namespace {

// out = x * cos + rotate_half(x) * sin, d values (rotate_half(x)[i] = x[(i + d/2) % d]; sin carries the sign).
inline void rotate(const float* x, const float* cos, const float* sin, float* out, int64_t d) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < d; i += 8) {
    const int64_t j = i < half ? i + half : i - half;
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(cos + i));
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(sin + i), v));
  }
}

}  // namespace

namespace {

// 8 floats -> 8 bf16, rounded to nearest even as torch's .to(torch.bfloat16) rounds (a NaN becomes 0x7FC0), so the
// native loop and the Python one write the same bf16 cache.
inline void store_bf16(__m256 v, uint16_t* dst) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i top = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  top = _mm256_blendv_epi8(top, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(top, top), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
}

// d floats into the cache at dst: copied (fp32 cache) or rounded (bf16 cache).
inline void store_row(const float* x, void* dst, bool bf16, int64_t d) {
  for (int64_t e = 0; e < d; e += 8) {
    if (bf16) store_bf16(_mm256_loadu_ps(x + e), static_cast<uint16_t*>(dst) + e);
    else _mm256_storeu_ps(static_cast<float*>(dst) + e, _mm256_loadu_ps(x + e));
  }
}

}  // namespace

torch::Tensor rope_and_write(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor kv, torch::Tensor rows,
                             torch::Tensor cache_pos, int64_t heads, int64_t kv_heads, int64_t d) {
  TORCH_CHECK(qkv.scalar_type() == torch::kFloat32, "rope_and_write: float32 activations only");
  TORCH_CHECK(kv.scalar_type() == torch::kFloat32 || kv.scalar_type() == torch::kBFloat16, "rope_and_write: a float32 or bfloat16 cache");
  TORCH_CHECK(d % 16 == 0 && d <= 128, "rope_and_write: head_dim must be a multiple of 16, at most 128");
  qkv = qkv.contiguous();
  cos = cos.contiguous();
  sin = sin.contiguous();
  TORCH_CHECK(kv.stride(3) == 1, "rope_and_write: the cache's last dim must be contiguous");
  const int64_t bsz = qkv.size(0), q = qkv.size(1), group = heads / kv_heads, width = (heads + 2 * kv_heads) * d;
  TORCH_CHECK(qkv.size(2) == width, "rope_and_write: qkv width does not match the heads");
  auto query = torch::empty({bsz, kv_heads, group * q, d}, qkv.options());
  auto rows_cpu = rows.to(torch::kLong).contiguous();
  auto pos_cpu = cache_pos.to(torch::kLong).contiguous();
  const int64_t* rp = rows_cpu.data_ptr<int64_t>();
  const int64_t* pp = pos_cpu.data_ptr<int64_t>();
  const float *xp = qkv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* qp = query.data_ptr<float>();
  const bool bf16 = kv.scalar_type() == torch::kBFloat16;
  char* kvp = static_cast<char*>(kv.data_ptr());
  const int64_t item = kv.element_size(), s0 = kv.stride(0) * item, s1 = kv.stride(1) * item, s2 = kv.stride(2) * item;
  at::parallel_for(0, bsz * q, 16, [&](int64_t t0, int64_t t1) {
    alignas(32) float key[128];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / q, i = t % q;
      const float* x = xp + t * width;
      const float *c = cp + t * d, *s = sp + t * d;
      for (int64_t h = 0; h < heads; ++h)  // query head h = kv * group + g -> row g * q + i of kv head kv
        rotate(x + h * d, c, s, qp + ((b * kv_heads + h / group) * group * q + (h % group) * q + i) * d, d);
      char* slot = kvp + rp[b] * s0 + pp[t] * s2;
      for (int64_t h = 0; h < kv_heads; ++h) {
        rotate(x + (heads + h) * d, c, s, key, d);
        store_row(key, slot + h * s1, bf16, d);
        store_row(x + (heads + kv_heads + h) * d, slot + (kv_heads + h) * s1, bf16, d);
      }
    }
  });
  return query;
}

torch::Tensor silu_mul(torch::Tensor gate_up) {
  TORCH_CHECK(gate_up.scalar_type() == torch::kFloat32, "silu_mul: float32 only");
  gate_up = gate_up.contiguous();
  const int64_t width = gate_up.size(-1), inter = width / 2, rows = gate_up.numel() / width;
  TORCH_CHECK(inter % 8 == 0, "silu_mul: the intermediate size must be a multiple of 8");
  auto sizes = gate_up.sizes().vec();
  sizes.back() = inter;
  auto out = torch::empty(sizes, gate_up.options());
  const float* gp = gate_up.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, 4, [&](int64_t r0, int64_t r1) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int64_t r = r0; r < r1; ++r) {
      const float *g = gp + r * width, *u = g + inter;
      float* o = op + r * inter;
      for (int64_t i = 0; i < inter; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, vec::exp8(_mm256_sub_ps(zero, gv))));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(gv, sig), _mm256_loadu_ps(u + i)));
      }
    }
  });
  return out;
}
