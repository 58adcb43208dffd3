// The Python module speculab.native builds: every kernel, bound once.
#include <pybind11/stl.h>
#include <torch/extension.h>

#include "attention.h"
#include "bf16_linear.h"
#include "layers.h"
#include "ops.h"
#include "suffix_tree.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &bf16_pack, "pack a [N, K] weight as bf16 panels [ceil(N/16), K, 16]");
  m.def("linear", &bf16_linear, "fp32 x @ W.T (+ bias, or + residual) from a packed bf16 weight, fp32 accumulation",
        py::arg("x"), py::arg("packed"), py::arg("n"), py::arg("bias") = py::none(), py::arg("residual") = py::none());
  m.def("cached_attention", &cached_attention, "attention of a few rows over the KV cache, rows independent");
  m.def("rms_norm_rows", &rms_norm_rows, "RMSNorm of fp32 rows, each alone");
  m.def("silu_mul", &silu_mul, "silu(gate) * up of [rows, 2*I] fp32");
  m.def("rope_and_write", &rope_and_write, "RoPE on q and k, keys and values written into the layer's cache");
  m.def("use_avx512", &use_avx512, "run the AVX512 kernels where the CPU has them (false: the AVX2 ones); returns the previous setting");
  m.def("avx512_in_use", &avx512_in_use, "whether the AVX512 kernels run");
  m.def("use_amx", &use_amx, "pack weights for the AMX kernel from now on where the CPU has AMX (false: the FMA kernels' panels); returns the previous setting");
  m.def("amx_in_use", &amx_in_use, "whether pack makes AMX-layout weights (and a bf16 cache's attention runs on the tiles)");
  m.def("attention_amx_available", &attention_amx_available, "whether a bf16 cache's attention runs on the tiles for this head dim");
  m.def("decoder_layers", &decoder_layers, "the decoder layers of models/llama.py on speculab's kernels", py::arg("xs"),
        py::arg("layers"), py::arg("kv"), py::arg("rows"), py::arg("row_start"), py::arg("cache_pos"), py::arg("cos"),
        py::arg("sin"), py::arg("mask"), py::arg("num_heads"), py::arg("num_kv_heads"), py::arg("head_dim"), py::arg("eps"),
        py::arg("capture"), py::arg("attention_max_q"), py::arg("input_norm") = true);
  py::class_<SuffixTree>(m, "SuffixTree", "suffix decoding's tree (speculative/suffix_tree.py is the reference)")
      .def(py::init<int64_t>(), py::arg("max_depth"))
      .def_property_readonly("max_depth", &SuffixTree::max_depth)
      .def("__contains__", &SuffixTree::contains)
      .def("extend", &SuffixTree::extend, py::arg("seq_id"), py::arg("tokens"))
      .def("remove", &SuffixTree::remove, py::arg("seq_id"))
      .def("speculate", &SuffixTree::speculate, py::arg("context"), py::arg("max_spec_tokens"), py::arg("max_spec_factor"),
           py::arg("max_spec_offset"), py::arg("min_token_prob"));
}
