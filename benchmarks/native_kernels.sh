#!/usr/bin/env bash
# The native kernels' figures (BENCHMARKS.md, "Native kernels"): one run, nothing else on the machine.
# Each line's last stdout line is one JSON document, appended to $OUT_DIR/<name>.jsonl (the names of the recorded
# run's files, so that a rerun lands beside them).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-benchmarks/results/native-kernels/epyc-avx2-2026-12-01}
mkdir -p "$OUT_DIR"
PY=.venv/bin/python
SPECULAB=.venv/bin/speculab
run() { local name=$1; shift; echo "+ $*" >&2; "$@" | tail -n 1 | tee -a "$OUT_DIR/$name.jsonl"; }
run forward_kernels $PY benchmarks/forward_kernels.py native --repeats 5
run linear_kernels $PY benchmarks/kernels_alone.py linear
run compare $SPECULAB compare llama.cpp --quant bf16
run compare $SPECULAB compare llama.cpp --quant f32
run compare $SPECULAB compare llama.cpp --quant q4_1
run compare $SPECULAB compare llama.cpp --quant bf16 --batch-size 16 --prompt-tokens 512 --max-tokens 64
run compare $SPECULAB compare transformers --dtype float32
run compare $SPECULAB compare transformers --dtype float32 --batch-size 8
run distill_throughput $PY benchmarks/training.py distill --prompts 32 --repeats 3
