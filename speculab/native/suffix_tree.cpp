// Suffix decoding's tree (speculative/suffix_tree.py is the reference and the fallback): the same trie of suffixes
// cut to max_depth tokens, the same child order (by count, ties moving as ArcticInference's sibling lists move), the
// same float32 arithmetic, so the same drafts; about fifteen times faster to build than the Python one.
#include "suffix_tree.h"

#include <algorithm>

namespace {

// Count + 1: the child moves before the first sibling of the count its predecessor has, when that is its new count
// or its old one.
void raise_count(std::vector<SuffixNode*>& order, SuffixNode* node) {
  auto i = std::find(order.begin(), order.end(), node) - order.begin();
  int64_t count = node->count;
  node->count = count + 1;
  if (i == 0 || order[i - 1]->count > count + 1) return;
  int64_t target = order[i - 1]->count;
  auto j = i - 1;
  while (j > 0 && order[j - 1]->count == target) --j;
  order.erase(order.begin() + i);
  order.insert(order.begin() + j, node);
}

// Count - 1: a child with equal-count siblings after it moves to just before the first sibling counting less.
void lower_count(std::vector<SuffixNode*>& order, SuffixNode* node) {
  auto i = std::find(order.begin(), order.end(), node) - order.begin();
  int64_t count = node->count;
  node->count = count - 1;
  auto n = static_cast<ptrdiff_t>(order.size());
  if (i + 1 == n || order[i + 1]->count != count) return;
  auto k = i + 1;
  while (k < n && order[k]->count == count) ++k;
  order.erase(order.begin() + i);
  order.insert(order.begin() + (k - 1), node);
}

}  // namespace

SuffixTree::SuffixTree(int64_t max_depth) : max_depth_(max_depth) {
  TORCH_CHECK(max_depth >= 1, "max_depth must be at least 1, not ", max_depth);
}

bool SuffixTree::contains(int64_t seq_id) const { return seqs_.count(seq_id) > 0; }

void SuffixTree::extend(int64_t seq_id, const std::vector<int64_t>& tokens) {
  auto& seq = seqs_[seq_id];
  auto& active = active_[seq_id];
  for (int64_t token64 : tokens) {
    auto token = static_cast<int32_t>(token64);
    active.push_back(&root_);
    if (static_cast<int64_t>(active.size()) > max_depth_) active.pop_front();
    root_.count += 1;
    seq.push_back(token);
    for (auto& node : active) {
      auto found = node->children.find(token);
      SuffixNode* child;
      if (found == node->children.end()) {
        auto made = std::make_unique<SuffixNode>();
        made->token = token;
        made->count = 1;
        child = made.get();
        node->children.emplace(token, std::move(made));
        node->order.push_back(child);
      } else {
        child = found->second.get();
        if (node == &root_ || node->order.front() == child) {
          child->count += 1;  // the root's order is never read; the head stays the head
        } else {
          raise_count(node->order, child);
        }
      }
      node = child;
    }
  }
}

void SuffixTree::remove(int64_t seq_id) {
  auto found = seqs_.find(seq_id);
  if (found == seqs_.end()) return;
  std::vector<int32_t> seq = std::move(found->second);
  seqs_.erase(found);
  active_.erase(seq_id);
  auto n = static_cast<int64_t>(seq.size());
  for (int64_t start = 0; start < n; ++start) {
    root_.count -= 1;
    SuffixNode* node = &root_;
    for (int64_t i = start; i < std::min(n, start + max_depth_); ++i) {
      auto it = node->children.find(seq[i]);
      if (it == node->children.end()) break;
      SuffixNode* child = it->second.get();
      if (child->count == 1) {
        node->order.erase(std::find(node->order.begin(), node->order.end(), child));
        node->children.erase(it);
        break;
      }
      if (node == &root_) {
        child->count -= 1;
      } else {
        lower_count(node->order, child);
      }
      node = child;
    }
  }
}

SuffixNode* SuffixTree::match(const std::vector<int32_t>& context, size_t from) {
  SuffixNode* node = &root_;
  for (size_t i = from; i < context.size(); ++i) {
    auto it = node->children.find(context[i]);
    if (it == node->children.end()) return nullptr;
    node = it->second.get();
  }
  return node;
}

// From node, the most frequent child at each step while the path's probability stays at floor or more.
static std::tuple<std::vector<int64_t>, std::vector<double>, float> follow(SuffixNode* node, int64_t most, float floor) {
  std::vector<int64_t> tokens;
  std::vector<double> probs;
  float prob = 1.0f, score = 0.0f;
  while (static_cast<int64_t>(tokens.size()) < most && !node->order.empty()) {
    SuffixNode* child = node->order.front();
    prob *= static_cast<float>(child->count) / static_cast<float>(node->count);
    if (prob < floor) break;
    tokens.push_back(child->token);
    probs.push_back(prob);
    score += prob;
    node = child;
  }
  return {tokens, probs, score};
}

std::tuple<std::vector<int64_t>, std::vector<double>, double, int64_t> SuffixTree::speculate(
    const std::vector<int64_t>& context64, int64_t max_spec_tokens, double max_spec_factor, double max_spec_offset,
    double min_token_prob) {
  auto start = context64.size() > static_cast<size_t>(max_depth_) ? context64.size() - max_depth_ : 0;
  std::vector<int32_t> context(context64.begin() + start, context64.end());
  auto factor = static_cast<float>(max_spec_factor), offset = static_cast<float>(max_spec_offset);
  auto floor = static_cast<float>(min_token_prob);
  std::vector<int64_t> best_tokens;
  std::vector<double> best_probs;
  float best_score = 0.0f;
  int64_t best_match = 0;
  for (size_t match_len = 1; match_len < context.size(); ++match_len) {
    SuffixNode* node = match(context, context.size() - match_len);
    if (node == nullptr) break;
    volatile float product = static_cast<float>(static_cast<int64_t>(match_len)) * factor;  // volatile: never fused
    float bound = product + offset;                                                         // into one FMA rounding
    auto most = std::max<int64_t>(0, std::min<int64_t>(max_spec_tokens, static_cast<int64_t>(bound + 1e-6)));
    auto [tokens, probs, score] = follow(node, most, floor);
    if (score >= best_score) {
      best_tokens = std::move(tokens);
      best_probs = std::move(probs);
      best_score = score;
      best_match = static_cast<int64_t>(match_len);
    }
  }
  return {best_tokens, best_probs, static_cast<double>(best_score), best_match};
}
