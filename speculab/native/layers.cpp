// The decoder layers of models/llama.py (Block.forward) in one C++ loop over speculab's kernels:
// RMSNorm, the q|k|v matmul, RoPE writing keys and values straight into the cache, attention, the output
// matmul adding the residual in its store, RMSNorm, gate|up, SiLU-times-up, down adding the residual.
// Five ATen-free passes and four matmuls a layer instead of about 25 ATen ops, each with a dispatch and an
// allocation. The math is the Python loop's (the reference and fallback), not its rounding: every row is
// computed alone, in a fixed order, so a verify forward gives bit for bit what one-token forwards give.
// Forwards of more than attention_max_q new tokens per row (prefill chunks) use ATen's flash attention.
// An EAGLE-1/2 head's one layer runs here too (input_norm false: its layer has no input RMSNorm).
#include "layers.h"

#include "attention.h"
#include "bf16_linear.h"
#include "ops.h"

namespace {

// One layer's tensors, in the order models/native_layers.py lists them.
enum Param { kNorm1, kQkv, kQkvBias, kOut, kNorm2, kGateUp, kDown, kNumParams };

c10::optional<torch::Tensor> maybe(const torch::Tensor& t) {
  return t.numel() ? c10::optional<torch::Tensor>(t) : c10::nullopt;
}

}  // namespace

std::tuple<torch::Tensor, std::vector<torch::Tensor>> decoder_layers(
    torch::Tensor x,                              // [batch, q, hidden]
    const std::vector<std::vector<torch::Tensor>>& layers,
    torch::Tensor kv,                             // [layers, slots, 2*kv_heads, max_len, head_dim]
    torch::Tensor rows,                           // [batch] cache slot of each row
    int64_t row_start,                            // rows as the range row_start.. when >= 0 (a view, no gather)
    torch::Tensor cache_pos,                      // [batch, q] KV write positions
    torch::Tensor cos, torch::Tensor sin,         // [batch, 1, q, head_dim]
    torch::Tensor mask,                           // [batch, 1, group*q, length] additive
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps,
    const std::vector<int64_t>& capture, int64_t attention_max_q,
    bool input_norm) {                            // false: no RMSNorm before attention (an EAGLE head's layer)
  const int64_t bsz = x.size(0), q = x.size(1), hidden = x.size(2), length = mask.size(-1);
  const int64_t h = num_heads, hkv = num_kv_heads, d = head_dim;
  std::vector<torch::Tensor> captured;
  x = x.contiguous();
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& p = layers[i];
    TORCH_CHECK(p.size() == kNumParams, "decoder_layers: layer ", i, " has ", p.size(), " tensors");
    if (std::find(capture.begin(), capture.end(), static_cast<int64_t>(i)) != capture.end()) captured.push_back(x);
    auto layer_kv = kv.select(0, i);
    // attention
    auto qkv = bf16_linear(input_norm ? rms_norm_rows(x, p[kNorm1], eps) : x, p[kQkv], (h + 2 * hkv) * d, maybe(p[kQkvBias]));
    auto query = rope_and_write(qkv, cos, sin, layer_kv, rows, cache_pos, h, hkv, d);  // [batch, kv_heads, group*q, d]
    auto cached = row_start >= 0 ? layer_kv.slice(0, row_start, row_start + bsz) : layer_kv.index_select(0, rows);
    cached = cached.slice(2, 0, length);
    auto keys = cached.slice(1, 0, hkv), values = cached.slice(1, hkv);
    auto out = q <= attention_max_q ? cached_attention(query, keys, values, mask)
                                    : at::scaled_dot_product_attention(query, keys.to(torch::kFloat32), values.to(torch::kFloat32), mask);
    out = out.view({bsz, h, q, d}).transpose(1, 2).reshape({bsz, q, h * d});
    x = bf16_linear(out, p[kOut], hidden, c10::nullopt, x);
    // MLP
    const int64_t intermediate = packed_in_features(p[kDown]);  // the down projection's input width
    auto gate_up = bf16_linear(rms_norm_rows(x, p[kNorm2], eps), p[kGateUp], 2 * intermediate, c10::nullopt);
    x = bf16_linear(silu_mul(gate_up), p[kDown], hidden, c10::nullopt, x);
  }
  return {x, captured};
}
