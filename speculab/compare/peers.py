"""Peer benchmarks: speculab's baseline decoding against transformers and llama.cpp.

Knows: how to build the same real-code prompt for every side (a window of
CPython 3.11.7's ``textwrap.py``, PSF-2.0, shipped in ``bench/workload_files``, inside a
"refactor this" chat message, cut to an exact token count), and how to time
decoding the same way for every side: the decode rate of a run is
``batch * (N - 1) / (t(last token) - t(first token of the last row))``, which
leaves prefill out of the figure; the reported rate is the median over repeats,
all in one process, after a short warm-up run.

Does not know: how speculab speculates (``compare_eagle_reference`` runs its EAGLE beside the reference code through
the method table; ``compare llama.cpp --method`` hands over to ``speculation.py``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import torch

from speculab.bench.agreement import prefix_agreement
from speculab.compare import llamacpp
from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine, sequence_length
from speculab.files import cache_dir
from speculab.models.eagle_head import load_eagle_head
from speculab.models.linear import linear_kind
from speculab.models.tokenizer import Tokenizer
from speculab.runtime import DTYPES, LoadedModel, load
from speculab.sampling import SamplingParams
from speculab.speculative.eagle import EagleProposer, StaticTreeEagleProposer
from speculab.speculative.proposer import Proposer
from speculab.speculative.stats import SpecStats

CODE_FILE = "textwrap_cpython_3.11.7.py.txt"


def code_prompts(tokenizer: Tokenizer, num_tokens: int, count: int) -> list[list[int]]:
    """``count`` chat prompts of at most ``num_tokens`` tokens (as close as whole characters allow),
    each over a different window of real code."""
    lines = resources.files("speculab.bench").joinpath("workload_files", CODE_FILE).read_text().splitlines(keepends=True)

    def encode(code: str) -> list[int]:
        return tokenizer.encode_chat([{"role": "user", "content": f"Refactor this Python code for readability:\n```python\n{code}```"}])

    prompts = []
    for i in range(count):
        window = "".join(lines[(i * 37) % max(1, len(lines) // 2) :])
        if len(encode(window)) < num_tokens:
            raise ValueError(f"{CODE_FILE} is too short for a {num_tokens}-token prompt")
        lo, hi = 0, len(window)  # largest prefix of the window that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if len(encode(window[:mid])) <= num_tokens else (lo, mid - 1)
        prompts.append(encode(window[:lo]))
    return prompts


def measure(run: Callable[[int], tuple[float, float]], batch: int, max_tokens: int, repeats: int) -> dict:
    """Median decode tok/s over ``repeats`` runs of ``run(n)``, after a short warm-up.

    ``run(n)`` generates n tokens per row and returns (time of the last row's first token,
    time of the last token): every row decodes n-1 tokens between the two, prefill excluded.
    """
    run(4)
    rates = []
    for _ in range(repeats):
        first, last = run(max_tokens)
        rates.append(batch * (max_tokens - 1) / (last - first))
    return {"tok_s": statistics.median(rates), "runs_tok_s": rates}


def speculab_side(
    loaded: LoadedModel, prompts: list[list[int]], max_tokens: int, repeats: int, proposer: Proposer | None = None
) -> tuple[dict, list[int]]:
    """Decode rate of speculab's engine (with ``proposer``, or plain), and τ of the last run."""
    max_len = sequence_length(max(map(len, prompts)), max_tokens, proposer)
    engine = Engine(loaded.model, max_batch=len(prompts), max_seq_len=max_len, proposer=proposer)
    last: list = []

    def run(n: int) -> tuple[float, float]:
        last[:] = engine.generate(prompts, SamplingParams(max_tokens=n, ignore_eos=True))
        return max(r.token_times[0] for r in last), max(r.token_times[-1] for r in last)

    result = measure(run, len(prompts), max_tokens, repeats)
    stats = SpecStats()
    for r in last:
        stats.merge(r.stats)
    result["tau"] = stats.mean_acceptance_length
    return result, last[0].output_ids


class _TimingStreamer:
    """A transformers streamer that only records when each generated token arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())  # the first call carries the prompt

    def end(self) -> None:
        pass


def transformers_side(path: Path, dtype: str, prompts: list[list[int]], max_tokens: int, repeats: int) -> tuple[dict, list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype]).eval()
    ids = torch.tensor(prompts)
    last: list = []

    def run(n: int) -> tuple[float, float]:
        streamer = _TimingStreamer()
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=0,
                streamer=streamer,
            )
        last[:] = [out[0, ids.shape[1] :].tolist()]
        return streamer.times[1], streamer.times[-1]

    return measure(run, len(prompts), max_tokens, repeats), last[0]


def _setup(args: argparse.Namespace) -> LoadedModel:
    if args.threads:
        torch.set_num_threads(args.threads)
    return load(args.model, args.dtype, args.device, args.kv_dtype)  # no --dtype: the machine's default (runtime.default_dtype)


def _run_fields(loaded: LoadedModel, args: argparse.Namespace) -> dict:
    """What every peer comparison records of speculab's side and the run's settings."""
    return {
        "dtype": loaded.dtype,
        "kv_dtype": loaded.kv_dtype,
        "linear_kernels": linear_kind(loaded.model),
        "cpu_flags": reported_cpu_flags(),
        "batch_size": args.batch_size,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
    }


def compare_transformers(args: argparse.Namespace) -> dict:
    loaded = _setup(args)
    prompts = code_prompts(loaded.tokenizer, args.prompt_tokens, args.batch_size)
    ours, our_tokens = speculab_side(loaded, prompts, args.max_tokens, args.repeats)
    hf, hf_tokens = transformers_side(loaded.path, loaded.dtype, prompts, args.max_tokens, args.repeats)
    import transformers

    return {
        "peer": "transformers",
        "peer_version": transformers.__version__,
        **_run_fields(loaded, args),
        "speculab_tok_s": ours["tok_s"],
        "hf_tok_s": hf["tok_s"],
        "ratio": ours["tok_s"] / hf["tok_s"],
        "speculab_runs_tok_s": ours["runs_tok_s"],
        "hf_runs_tok_s": hf["runs_tok_s"],
        "greedy_agreement": prefix_agreement([our_tokens], [hf_tokens]),
    }


def compare_llamacpp(args: argparse.Namespace) -> dict:
    if args.model not in (None, "default"):
        raise ValueError("compare llama.cpp runs on the embedded model's GGUF; --model is not supported here")
    if args.method is not None:
        if args.batch_size != 1:
            raise ValueError("compare llama.cpp --method runs at batch 1 (llama-server's one slot); drop --batch-size")
        from speculab.compare.speculation import compare_llamacpp_speculation

        return compare_llamacpp_speculation(args, _setup(args))
    loaded = _setup(args)
    prompts = code_prompts(loaded.tokenizer, args.prompt_tokens, args.batch_size)
    gguf, source = llamacpp.embedded_gguf(args.quant)
    ours, our_tokens = speculab_side(loaded, prompts, args.max_tokens, args.repeats)
    # batch 1: one stream; more: one llama_batch per step with a token of each sequence (measure_llamacpp_batched)
    peer_prompts = prompts[0] if args.batch_size == 1 else prompts
    peer = llamacpp.run_llamacpp(
        gguf, peer_prompts, args.max_tokens, args.repeats, torch.get_num_threads(), convert_from=source, ftype=args.quant
    )
    return {
        "peer": "llama.cpp",
        "llama_cpp_version": peer.get("llama_cpp_version"),
        "gguf": Path(gguf).name,
        **_run_fields(loaded, args),
        "speculab_tok_s": ours["tok_s"],
        "llamacpp_tok_s": peer["tok_s"],
        "ratio": ours["tok_s"] / peer["tok_s"],
        "speculab_runs_tok_s": ours["runs_tok_s"],
        "llamacpp_runs_tok_s": peer["runs"],
        "greedy_agreement": prefix_agreement([our_tokens], [peer["tokens"]]),
    }


REFERENCE_VENV = "eagle-ref-venv"  # under speculab's cache: torch + transformers + eagle-llm 1.2.1 (--no-deps)


def reference_head_folder(head: Path, scratch: Path, target: Path) -> Path:
    """The head as the reference code reads it: ``pytorch_model.bin`` only, with ``embed_tokens.weight``
    (published heads carry a frozen copy of the target's embedding; speculab's trained heads leave it out
    and read the target's). Written once into a scratch folder when the head lacks either."""

    from safetensors import safe_open
    from safetensors.torch import load_file

    if (head / "pytorch_model.bin").exists():
        return head
    state = {k: v.float() for k, v in load_file(head / "model.safetensors").items()}
    if "embed_tokens.weight" not in state:
        for file in sorted(target.glob("*.safetensors")):
            with safe_open(file, "pt") as f:
                if "model.embed_tokens.weight" in f.keys():
                    state["embed_tokens.weight"] = f.get_tensor("model.embed_tokens.weight").float()
    scratch.mkdir(parents=True, exist_ok=True)
    shutil.copy(head / "config.json", scratch / "config.json")
    torch.save(state, scratch / "pytorch_model.bin")
    return scratch


def compare_eagle_reference(args: argparse.Namespace) -> dict:
    """speculab's EAGLE (the reference's static tree, and EAGLE-2's dynamic tree) against the EAGLE reference code."""

    if not args.eagle:
        raise ValueError("compare eagle-reference needs --eagle PATH (an EAGLE-1 head for the target)")
    loaded = _setup(args)
    prompts = code_prompts(loaded.tokenizer, args.prompt_tokens, 1)
    head = load_eagle_head(args.eagle, loaded.model)
    static = StaticTreeEagleProposer(head, loaded.model, tree=args.tree)
    dynamic = EagleProposer(head, loaded.model, num_steps=args.num_steps, topk=args.topk, num_draft_tokens=args.num_draft_tokens)
    ours_static, static_tokens = speculab_side(loaded, prompts, args.max_tokens, args.repeats, static)
    ours_dynamic, _ = speculab_side(loaded, prompts, args.max_tokens, args.repeats, dynamic)
    python = Path(args.reference_python or cache_dir() / REFERENCE_VENV / "bin" / "python")
    if not python.exists():
        raise RuntimeError(f"{python}: no reference environment; see BENCHMARKS.md for the two install commands")
    runner = Path(__file__).with_name("eagle_reference_runner.py")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prompts[0], f)
    head_dir = reference_head_folder(Path(args.eagle), Path(tempfile.mkdtemp(prefix="speculab-eagle-ref-")), loaded.path)
    cmd = [
        str(python),
        str(runner),
        "--base",
        str(loaded.path),
        "--head",
        str(head_dir),
        "--prompt-ids-file",
        f.name,
        "--max-new-tokens",
        str(args.max_tokens),
        "--repeats",
        str(args.repeats),
        "--tree",
        args.tree,
        "--threads",
        str(torch.get_num_threads()),
        "--dtype",
        loaded.dtype,
    ]
    if args.reference_path:
        cmd += ["--reference-path", str(args.reference_path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    Path(f.name).unlink(missing_ok=True)
    if done.returncode != 0:
        raise RuntimeError(f"the EAGLE reference run failed:\n{done.stderr[-3000:]}")
    ref = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "peer": "eagle-reference",
        "dtype": loaded.dtype,
        "kv_dtype": loaded.kv_dtype,
        "linear_kernels": linear_kind(loaded.model),
        "cpu_flags": reported_cpu_flags(),
        "batch_size": args.batch_size,
        "prompt_tokens": len(prompts[0]),
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "tree": args.tree,
        "eagle": str(args.eagle),
        "speculab_static_tok_s": ours_static["tok_s"],
        "speculab_static_tau": ours_static["tau"],
        "speculab_dynamic_tok_s": ours_dynamic["tok_s"],
        "speculab_dynamic_tau": ours_dynamic["tau"],
        "dynamic_tree": {"num_steps": args.num_steps, "topk": args.topk, "num_draft_tokens": args.num_draft_tokens},
        "reference_tok_s": ref["tok_s"],
        "reference_tau": ref["tau"],
        "reference_timing": ref.get("timing"),
        "ratio": ours_static["tok_s"] / ref["tok_s"],
        "ratio_dynamic": ours_dynamic["tok_s"] / ref["tok_s"],
        "greedy_agreement": prefix_agreement([static_tokens], [ref["tokens"]]),
    }
