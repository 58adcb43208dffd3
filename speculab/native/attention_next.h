// The next chunk's prefetch, shared by the AVX512 and AVX2 attention kernels (attention_avx512.cpp, attention_avx2.cpp).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "attention.h"

// The next chunk's keys and values, fetched into L2 a few 64-byte lines at a time. Why: a chunk's keys are read
// (transposed) before its arithmetic and its values during it; without this, each thread waits on memory while
// transposing and leaves the memory bus idle while it computes. The arithmetic's loops ask due(i) each
// iteration; a step fetches per_step lines of keys and as many of values, spread evenly over the chunk. One line
// pair every iteration measured fastest for a few rows (q <= 4), one every 2-8 iterations for more (8-10% faster
// at q = 8-16: fewer scalar instructions between the multiply-adds).
class NextChunk {
 public:
  NextChunk(const AttentionChunk& c, int64_t iterations) {
    if (!c.next_k || c.kv_stride != c.d) return;  // keys (and values) contiguous: one byte range each
    k_ = reinterpret_cast<const char*>(c.next_k);
    v_ = reinterpret_cast<const char*>(c.next_v);
    end_ = c.next_n * c.d * int64_t(sizeof(float));
    const int64_t lines = end_ / 64;
    while ((mask_ + 1) * 2 * lines <= iterations && mask_ < 7) mask_ = 2 * mask_ + 1;  // every 1, 2, 4 or 8
    per_step_ = std::max<int64_t>(1, (lines * (mask_ + 1) + iterations - 1) / std::max<int64_t>(1, iterations));
  }
  inline bool due(int64_t i) const { return !(i & mask_); }
  inline void step() {
    for (int64_t i = 0; i < per_step_ && at_ < end_; ++i, at_ += 64) {
      _mm_prefetch(k_ + at_, _MM_HINT_T1);
      _mm_prefetch(v_ + at_, _MM_HINT_T1);
    }
  }

 private:
  const char *k_ = nullptr, *v_ = nullptr;
  int64_t end_ = 0, per_step_ = 0, at_ = 0, mask_ = 0;
};
