// The decoder layers' loop of models/llama.py in C++ (see layers.cpp).
#pragma once
#include <torch/extension.h>

#include <tuple>
#include <vector>

std::tuple<torch::Tensor, std::vector<torch::Tensor>> decoder_layers(
    const std::vector<torch::Tensor>& xs, const std::vector<std::vector<torch::Tensor>>& layers, torch::Tensor kv,
    const std::vector<torch::Tensor>& rows, const std::vector<int64_t>& row_start, const std::vector<torch::Tensor>& cache_pos,
    const std::vector<torch::Tensor>& cos, const std::vector<torch::Tensor>& sin, const std::vector<torch::Tensor>& mask,
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps, const std::vector<int64_t>& capture,
    int64_t attention_max_q, bool input_norm);
