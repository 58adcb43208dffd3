// The decoder layers' loop of models/llama.py (Transformer.forward), in C++: the same ATen ops in the same
// order, so with ATen's attention (attention_max_q = 0) the result is bit for bit the Python loop's; what goes
// is the Python interpreter's cost per op (about 15 ops a layer). Linears are bf16_linear's. Forwards of at
// most attention_max_q new tokens per row (decode and verify steps) use cached_attention (attention.cpp)
// instead of ATen's flash attention. The Python loop stays the reference and the fallback.
#include "layers.h"

#include "attention.h"
#include "bf16_linear.h"

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
    torch::Tensor heads_index,                    // [1, 2*kv_heads, 1]
    torch::Tensor cos, torch::Tensor sin,         // [batch, 1, q, head_dim]
    torch::Tensor mask,                           // [batch, 1, group*q, length] additive
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps,
    const std::vector<int64_t>& capture, int64_t attention_max_q) {
  const int64_t bsz = x.size(0), q = x.size(1), hidden = x.size(2), length = mask.size(-1);
  const int64_t h = num_heads, hkv = num_kv_heads, d = head_dim;
  std::vector<torch::Tensor> captured;
  const auto write_index = c10::List<c10::optional<torch::Tensor>>(
      {rows.index({torch::indexing::Slice(), torch::indexing::None, torch::indexing::None}), heads_index,
       cache_pos.index({torch::indexing::Slice(), torch::indexing::None, torch::indexing::Slice()})});
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& p = layers[i];
    TORCH_CHECK(p.size() == kNumParams, "decoder_layers: layer ", i, " has ", p.size(), " tensors");
    if (std::find(capture.begin(), capture.end(), static_cast<int64_t>(i)) != capture.end()) captured.push_back(x);
    auto layer_kv = kv.select(0, i);
    // attention
    auto normed = at::rms_norm(x, {hidden}, maybe(p[kNorm1]), eps);
    auto qkv = bf16_linear(normed, p[kQkv], (h + 2 * hkv) * d, maybe(p[kQkvBias]))
                   .view({bsz, q, h + 2 * hkv, d})
                   .transpose(1, 2);
    auto qk = qkv.slice(1, 0, h + hkv);
    qk = at::addcmul(qk * cos, qk.roll({d / 2}, {-1}), sin);
    auto new_kv = at::cat({qk.slice(1, h), qkv.slice(1, h + hkv)}, 1);
    layer_kv.index_put_(write_index, new_kv);
    auto cached = row_start >= 0 ? layer_kv.slice(0, row_start, row_start + bsz) : layer_kv.index_select(0, rows);
    cached = cached.slice(2, 0, length);
    auto query = qk.slice(1, 0, h).reshape({bsz, hkv, (h / hkv) * q, d});
    auto out = q <= attention_max_q ? cached_attention(query, cached.slice(1, 0, hkv), cached.slice(1, hkv), mask)
                                    : at::scaled_dot_product_attention(query, cached.slice(1, 0, hkv), cached.slice(1, hkv), mask);
    out = out.view({bsz, h, q, d}).transpose(1, 2).reshape({bsz, q, h * d});
    x = x + bf16_linear(out, p[kOut], hidden, c10::nullopt);
    // MLP
    normed = at::rms_norm(x, {hidden}, maybe(p[kNorm2]), eps);
    const int64_t intermediate = p[kDown].size(1);  // the down projection's input width
    auto gate_up = bf16_linear(normed, p[kGateUp], 2 * intermediate, c10::nullopt).chunk(2, -1);
    x = x + bf16_linear(at::silu(gate_up[0]) * gate_up[1], p[kDown], hidden, c10::nullopt);
  }
  return {x, captured};
}
