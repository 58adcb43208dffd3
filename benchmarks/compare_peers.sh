#!/usr/bin/env bash
# The peer comparisons recorded in BENCHMARKS.md, run one after another (never in parallel:
# this is a 2-core machine). Each command's last stdout line is one JSON document; they are
# collected into $OUT (default benchmarks/results/peers/epyc-avx2-2026-11-30/compare_peers.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/peers/epyc-avx2-2026-11-30/compare_peers.jsonl}
mkdir -p "$(dirname "$OUT")"
SPECULAB=${SPECULAB:-.venv/bin/speculab}
run() { echo "+ speculab $*" >&2; "$SPECULAB" "$@" | tail -n 1 | tee -a "$OUT"; }
run compare transformers --dtype bfloat16 --batch-size 1
run compare transformers --dtype float32 --batch-size 1
run compare transformers --dtype float32 --batch-size 8
run compare transformers --dtype bfloat16 --batch-size 8 --prompt-tokens 256
run compare llama.cpp --dtype bfloat16 --quant bf16
run compare llama.cpp --dtype float32 --quant bf16
run compare llama.cpp --dtype float32 --quant q4_1
# Speculation on the embedded model where no trained drafter is needed yet: prompt lookup.
PROMPT="Write unit tests with pytest for this function:
def slugify(text):
    text = text.lower().strip()
    text = re.sub(r'[^a-z0-9]+', '-', text)
    return text.strip('-')"
run generate --chat --max-tokens 128 --json --method ngram --compare-baseline --dtype float32 --prompt "$PROMPT"
run generate --chat --max-tokens 128 --json --method ngram --compare-baseline --dtype bfloat16 --prompt "$PROMPT"
