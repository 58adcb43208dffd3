// The Python module speculab.native builds: every kernel, bound once.
#include <torch/extension.h>

#include "attention.h"
#include "bf16_linear.h"
#include "layers.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &bf16_pack, "pack a [N, K] weight as bf16 panels [ceil(N/16), K, 16]");
  m.def("linear", &bf16_linear, "fp32 x @ W.T (+ bias) from a packed bf16 weight, fp32 accumulation");
  m.def("cached_attention", &cached_attention, "attention of a few rows over the KV cache, rows independent");
  m.def("decoder_layers", &decoder_layers, "the decoder layers' loop of models/llama.py, on bf16_linear");
}
