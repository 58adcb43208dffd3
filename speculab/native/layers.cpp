// The decoder layers of models/llama.py (Block.forward) in one C++ loop over speculab's kernels:
// RMSNorm, the q|k|v matmul, RoPE writing keys and values straight into the cache, attention, the output
// matmul adding the residual in its store, RMSNorm, gate|up, SiLU-times-up, down adding the residual.
// Five ATen-free passes and four matmuls a layer instead of about 25 ATen ops, each with a dispatch and an
// allocation. The math is the Python loop's (the reference and fallback), not its rounding: every row is
// computed alone, in a fixed order, so a verify forward gives bit for bit what one-token forwards give.
// Forwards of more than attention_max_q new tokens per row (prefill chunks) use ATen's flash attention.
// An EAGLE-1/2 head's one layer runs here too (input_norm false: its layer has no input RMSNorm).
// A forward may hold several parts, each a batch with its own rows, positions and mask (a step's verify and a prompt's
// chunk): their rows go through each matmul together, so the weights are read once for all of them, and each part
// attends alone. Returns x after the last layer and the captured inputs as [tokens, hidden], the parts' rows in turn.
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

// One part's attention: RoPE on its queries and keys, its keys and values written into its rows' cache, and its
// queries over those rows' cached positions; [batch * q, heads * d].
torch::Tensor part_attention(const torch::Tensor& qkv, const torch::Tensor& layer_kv, const torch::Tensor& rows, int64_t row_start,
                             const torch::Tensor& cache_pos, const torch::Tensor& cos, const torch::Tensor& sin,
                             const torch::Tensor& mask, int64_t h, int64_t hkv, int64_t d, int64_t attention_max_q) {
  const int64_t bsz = qkv.size(0), q = qkv.size(1), length = mask.size(-1);
  auto query = rope_and_write(qkv, cos, sin, layer_kv, rows, cache_pos, h, hkv, d);  // [batch, kv_heads, group*q, d]
  auto cached = row_start >= 0 ? layer_kv.slice(0, row_start, row_start + bsz) : layer_kv.index_select(0, rows);
  cached = cached.slice(2, 0, length);
  auto keys = cached.slice(1, 0, hkv), values = cached.slice(1, hkv);
  auto out = q <= attention_max_q ? cached_attention(query, keys, values, mask)
                                  : at::scaled_dot_product_attention(query, keys.to(torch::kFloat32), values.to(torch::kFloat32), mask);
  return out.view({bsz, h, q, d}).transpose(1, 2).reshape({bsz * q, h * d});
}

}  // namespace

std::tuple<torch::Tensor, std::vector<torch::Tensor>> decoder_layers(
    const std::vector<torch::Tensor>& xs,         // per part [batch, q, hidden]
    const std::vector<std::vector<torch::Tensor>>& layers,
    torch::Tensor kv,                             // [layers, slots, 2*kv_heads, max_len, head_dim]
    const std::vector<torch::Tensor>& rows,       // per part [batch] cache slot of each row
    const std::vector<int64_t>& row_start,        // per part: rows as the range row_start.. when >= 0 (a view, no gather)
    const std::vector<torch::Tensor>& cache_pos,  // per part [batch, q] KV write positions
    const std::vector<torch::Tensor>& cos,        // per part [batch, 1, q, head_dim]
    const std::vector<torch::Tensor>& sin,
    const std::vector<torch::Tensor>& mask,       // per part [batch, 1, group*q, length] additive
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps,
    const std::vector<int64_t>& capture, int64_t attention_max_q,
    bool input_norm) {                            // false: no RMSNorm before attention (an EAGLE head's layer)
  const size_t n_parts = xs.size();
  TORCH_CHECK(n_parts > 0 && rows.size() == n_parts && row_start.size() == n_parts && cache_pos.size() == n_parts &&
                  cos.size() == n_parts && sin.size() == n_parts && mask.size() == n_parts,
              "decoder_layers: every part needs its x, rows, row_start, cache_pos, cos, sin and mask");
  const int64_t hidden = xs[0].size(2), h = num_heads, hkv = num_kv_heads, d = head_dim;
  std::vector<int64_t> offset(n_parts + 1, 0);  // part p's rows of x: offset[p] .. offset[p + 1]
  std::vector<torch::Tensor> flat;
  for (size_t p = 0; p < n_parts; ++p) {
    offset[p + 1] = offset[p] + xs[p].size(0) * xs[p].size(1);
    flat.push_back(xs[p].reshape({-1, hidden}));
  }
  auto x = n_parts == 1 ? flat[0].contiguous() : torch::cat(flat);  // [tokens, hidden]: the matmuls read each weight once
  std::vector<torch::Tensor> captured;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& w = layers[i];
    TORCH_CHECK(w.size() == kNumParams, "decoder_layers: layer ", i, " has ", w.size(), " tensors");
    if (std::find(capture.begin(), capture.end(), static_cast<int64_t>(i)) != capture.end()) captured.push_back(x);
    auto layer_kv = kv.select(0, i);
    auto qkv = bf16_linear(input_norm ? rms_norm_rows(x, w[kNorm1], eps) : x, w[kQkv], (h + 2 * hkv) * d, maybe(w[kQkvBias]));
    std::vector<torch::Tensor> outs;
    for (size_t p = 0; p < n_parts; ++p) {
      const int64_t bsz = xs[p].size(0), q = xs[p].size(1);
      auto part_qkv = qkv.narrow(0, offset[p], offset[p + 1] - offset[p]).view({bsz, q, -1});
      outs.push_back(part_attention(part_qkv, layer_kv, rows[p], row_start[p], cache_pos[p], cos[p], sin[p], mask[p], h, hkv, d,
                                    attention_max_q));
    }
    auto out = n_parts == 1 ? outs[0] : torch::cat(outs);  // [tokens, heads * d]
    x = bf16_linear(out, w[kOut], hidden, c10::nullopt, x);
    // MLP
    const int64_t intermediate = packed_in_features(w[kDown]);  // the down projection's input width
    auto gate_up = bf16_linear(rms_norm_rows(x, w[kNorm2], eps), w[kGateUp], 2 * intermediate, c10::nullopt);
    x = bf16_linear(silu_mul(gate_up), w[kDown], hidden, c10::nullopt, x);
  }
  return {x, captured};
}
