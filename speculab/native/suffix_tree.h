// Suffix decoding's tree in C++ (the Python one in speculative/suffix_tree.py is its reference and fallback).
#pragma once

#include <torch/extension.h>

#include <deque>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

struct SuffixNode {
  int32_t token = -1;
  int64_t count = 0;
  std::unordered_map<int32_t, std::unique_ptr<SuffixNode>> children;
  std::vector<SuffixNode*> order;  // children, most frequent first
};

class SuffixTree {
 public:
  explicit SuffixTree(int64_t max_depth);
  bool contains(int64_t seq_id) const;
  void extend(int64_t seq_id, const std::vector<int64_t>& tokens);
  void remove(int64_t seq_id);
  // (token ids, their probabilities, the score, the match length) of the best path draft after context
  std::tuple<std::vector<int64_t>, std::vector<double>, double, int64_t> speculate(const std::vector<int64_t>& context,
                                                                                   int64_t max_spec_tokens,
                                                                                   double max_spec_factor,
                                                                                   double max_spec_offset,
                                                                                   double min_token_prob);
  int64_t max_depth() const { return max_depth_; }

 private:
  SuffixNode* match(const std::vector<int32_t>& context, size_t from);
  int64_t max_depth_;
  SuffixNode root_;
  std::unordered_map<int64_t, std::vector<int32_t>> seqs_;
  std::unordered_map<int64_t, std::deque<SuffixNode*>> active_;
};
