// fp32 activations times bf16 weights packed by bf16_pack (see bf16_linear.cpp).
#pragma once
#include <torch/extension.h>

torch::Tensor bf16_pack(torch::Tensor w);
// residual: y = residual + x @ W.T, the residual connection's sum made in the store (not with a bias).
torch::Tensor bf16_linear(torch::Tensor x, torch::Tensor packed, int64_t n, c10::optional<torch::Tensor> bias,
                          c10::optional<torch::Tensor> residual = c10::nullopt);
// The AVX512 kernels over the same packed panels and the same FMA chains (bf16_linear_avx512.cpp): y[m, n] =
// (res +) x[m, k] @ W.T. Returns false, computing nothing, when built without AVX512F.
bool bf16_linear_avx512(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t panels, float* y, int64_t n,
                        const float* res);
// Whether the AVX512 kernels (linear and attention) run where the CPU has them; false runs the AVX2 ones, for
// benchmarks that set the two side by side and tests that hold them equal. Returns the previous setting.
bool use_avx512(bool on);
bool avx512_in_use();
// The AMX kernel (bf16_linear_amx.cpp): its own packing, [panels, K/2, 32], and an fp32-accurate product on the
// tiles. use_amx decides what bf16_pack makes from now on (true: the AMX layout where the CPU has AMX and K is a
// multiple of 32); bf16_linear runs whichever kernel the packed weight's layout is for.
torch::Tensor amx_pack(torch::Tensor w);
void bf16_linear_amx(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t panels, float* y, int64_t n,
                     const float* res);
bool use_amx(bool on);
bool amx_in_use();
bool amx_tiles_granted();  // whether this process may use the tiles at all (the CPU has them and Linux granted them)
// The tile shapes of the AMX kernels: the last `right_tiles` tiles 16 x 64 bytes (right operands: pairs of bf16),
// the others `rows` x 64 bytes (accumulators and left operands).
void amx_configure(int64_t rows, int right_tiles);
// x [m, k] fp32 -> [3, padded, k] bf16: the planes hi, mid, lo with x = hi + mid + lo exactly (hi is x with its low
// 16 bits cleared, mid the same of x - hi); rows from m to padded are zero.
void amx_split_planes(const float* x, int64_t m, int64_t k, int64_t padded, uint16_t* out);
// The input features of a weight packed by bf16_pack, whichever layout it has.
inline int64_t packed_in_features(const torch::Tensor& packed) {
  return packed.size(2) == 32 ? 2 * packed.size(1) : packed.size(1);
}
