"""``speculab compare llama.cpp --method draft|ngram``: llama.cpp's speculation beside speculab's, in one run.

Knows: the four sides (each engine decoding plainly, and speculating with the same method, drafter and draft
length), on the same prompts (the benchmark workload's, the domains in turn, each through the target's chat
template), at batch 1, greedy, exactly ``max_tokens`` tokens a prompt. A pass runs every prompt once on one side;
the sides take turns, in ABBA order over the rounds after a warm-up round, and a llama-server not taking its pass
is paused (SIGSTOP), so on two cores nothing computes beside what is timed. A pass's decode rate is
``sum(tokens - 1) / sum(time from a prompt's first token to its last)``: prefill left out, by speculab's token
times and by llama-server's own timings (which count the same way). Each engine's speedup is paired, its
speculating pass over its plain pass in the same round; the record gives the median of each with the spread, the
acceptance rate (accepted / drafted, as vLLM and llama.cpp define it), and whether speculating kept each engine's
greedy output.

Does not know: how llama-server's flags are chosen (``llama_server``), how the draft becomes a GGUF
(``gguf_draft``), or how speculab's proposers work (the method table, ``speculab.methods``).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from speculab.bench.agreement import prefix_agreement
from speculab.bench.turns import abba
from speculab.bench.workload import interleave_domains, load_workload
from speculab.compare import llamacpp
from speculab.compare.gguf_draft import draft_gguf
from speculab.compare.llama_server import Completion, LlamaServerSpec, complete, llama_server_command
from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine, sequence_length
from speculab.files import cache_dir
from speculab.launch.environments import LLAMA_CPP_PYTHON_VERSION, llama_server
from speculab.launch.server import EngineServer
from speculab.methods import METHODS, MethodSpec, chain_length, new_proposer, parse_method, proposer_options
from speculab.models.linear import linear_kind
from speculab.runtime import LoadedModel
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats


@dataclass
class Pass:
    """One side's pass over the prompts."""

    tokens: list[list[int]]  # [prompt][token]
    decoded: int  # tokens after each prompt's first, summed
    seconds: float  # from each prompt's first token to its last, summed
    drafted: int = 0
    accepted: int = 0

    @property
    def tok_s(self) -> float:
        return self.decoded / self.seconds


@dataclass
class Side:
    """One engine decoding one way, and its passes."""

    name: str  # "speculab ngram", "llama.cpp baseline", ...
    run: Callable[[list[list[int]], int], Pass]  # (prompts [prompt][token], max_tokens) -> its pass
    passes: list[Pass] = field(default_factory=list)


def speculab_runner(engine: Engine):
    def run(prompts: list[list[int]], max_tokens: int) -> Pass:
        tokens, decoded, seconds, stats = [], 0, 0.0, SpecStats()
        for prompt in prompts:
            (result,) = engine.generate([prompt], SamplingParams(max_tokens=max_tokens, ignore_eos=True))
            tokens.append(result.output_ids)
            decoded += len(result.token_times) - 1
            seconds += result.token_times[-1] - result.token_times[0]
            stats.merge(result.stats)
        return Pass(tokens, decoded, seconds, stats.drafted_depth, stats.accepted_tokens)

    return run


def llama_runner(server: EngineServer):
    def run(prompts: list[list[int]], max_tokens: int) -> Pass:
        with server.taking_turn():
            done: list[Completion] = [complete(server.command.url, p, max_tokens) for p in prompts]
        short = [c.predicted_n for c in done if c.predicted_n != max_tokens]
        if short:
            raise RuntimeError(f"llama-server generated {short} tokens where {max_tokens} were asked; see {server.log}")
        return Pass(
            [c.tokens for c in done],
            sum(c.predicted_n - 1 for c in done),
            sum(c.predicted_ms for c in done) / 1000.0,
            sum(c.draft_n for c in done),
            sum(c.draft_accepted for c in done),
        )

    return run


def passes_in_turns(sides: list[Side], prompts: list[list[int]], max_tokens: int, repeats: int) -> None:
    """A warm-up round (the first prompt on each side, not kept), then ``repeats`` rounds in ABBA order."""
    for side in sides:
        side.run(prompts[:1], max_tokens)
    for _, side in tqdm(abba(sides, repeats), total=len(sides) * repeats, desc="passes over the prompts", unit="pass"):
        side.passes.append(side.run(prompts, max_tokens))


def summary(plain: Side, speculating: Side) -> dict:
    """One engine's figures: medians of its passes, its paired speedup with the spread, its acceptance, its output."""
    ratios = [s.tok_s / p.tok_s for p, s in zip(plain.passes, speculating.passes, strict=True)]
    drafted = sum(p.drafted for p in speculating.passes)
    accepted = sum(p.accepted for p in speculating.passes)
    return {
        "plain_tok_s": statistics.median(p.tok_s for p in plain.passes),
        "speculating_tok_s": statistics.median(p.tok_s for p in speculating.passes),
        "speedup": statistics.median(ratios),
        "speedup_range": [min(ratios), max(ratios)],
        "speedups": ratios,
        "plain_runs_tok_s": [p.tok_s for p in plain.passes],
        "speculating_runs_tok_s": [p.tok_s for p in speculating.passes],
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "output_agreement": prefix_agreement(speculating.passes[-1].tokens, plain.passes[-1].tokens),
    }


def speculating_spec(args: argparse.Namespace) -> MethodSpec:
    """``--method`` as a spec (``draft``, ``ngram:num_speculative_tokens=5``…), ``--draft`` naming its drafter."""
    spec = parse_method(args.method)
    if spec.method.llama_cpp is None:
        both = [name for name, m in METHODS.items() if m.llama_cpp]
        raise ValueError(f"--method {spec.name}: llama.cpp speculates with {' or '.join(both)} only")
    if args.draft is not None:
        if spec.method.drafter != "draft":
            raise ValueError("--draft names a draft model: only with --method draft")
        spec = MethodSpec(spec.name, {**spec.params, "draft": str(args.draft)})
    return spec


def workload_prompts(loaded: LoadedModel, count: int, workload: str | None = None) -> list[list[int]]:
    items = interleave_domains(load_workload(workload), count)
    return [loaded.tokenizer.encode_chat(item.message_dicts()) for item in items]


def server_specs(spec: MethodSpec, args: argparse.Namespace, target: Path, context: int) -> tuple[LlamaServerSpec, LlamaServerSpec]:
    """llama-server plainly and speculating as ``spec`` does: the same draft length, the draft converted."""
    common = dict(binary=llama_server(create=True), target=target, threads=torch.get_num_threads(), context=context)
    k = chain_length(spec)
    if spec.method.drafter:
        outtype = args.quant if args.quant in ("f32", "bf16") else "f32"
        method = dict(spec_type=spec.method.llama_cpp, draft=draft_gguf(spec.params[spec.method.drafter], outtype), draft_max=k)
    else:
        method = dict(spec_type=spec.method.llama_cpp, draft_max=k, ngram_size=args.ngram_size)
    return LlamaServerSpec(**common, port=args.port), LlamaServerSpec(**common, **method, port=args.port + 1)


def speculab_sides(loaded: LoadedModel, spec: MethodSpec, prompts: list[list[int]], max_tokens: int) -> list[Side]:
    longest = max(map(len, prompts))
    proposer = new_proposer(spec, proposer_options(spec, loaded))
    plain = Engine(loaded.model, max_batch=1, max_seq_len=sequence_length(longest, max_tokens, None))
    speculating = Engine(loaded.model, max_batch=1, max_seq_len=sequence_length(longest, max_tokens, proposer), proposer=proposer)
    return [Side("speculab baseline", speculab_runner(plain)), Side(f"speculab {spec.name}", speculab_runner(speculating))]


def compare_llamacpp_speculation(args: argparse.Namespace, loaded: LoadedModel) -> dict:
    """The four sides in turns; the record's last line is one JSON document (``speculab compare``)."""
    spec = speculating_spec(args)
    prompts = workload_prompts(loaded, args.prompts, args.workload)
    target = llamacpp.converted_gguf(args.quant)
    context = -(-(max(map(len, prompts)) + args.max_tokens + 64) // 256) * 256
    plain_spec, speculating = server_specs(spec, args, target, context)
    logs = cache_dir() / "logs" / "compare-llama-server"
    with ExitStack() as stack:
        servers = []
        for s in (plain_spec, speculating):
            servers.append(stack.enter_context(EngineServer(llama_server_command(s), logs / f"{s.spec_type or 'plain'}.log")))
            servers[-1].pause()
        ours = speculab_sides(loaded, spec, prompts, args.max_tokens)
        theirs = [Side("llama.cpp baseline", llama_runner(servers[0])), Side(f"llama.cpp {spec.name}", llama_runner(servers[1]))]
        passes_in_turns([*ours, *theirs], prompts, args.max_tokens, args.repeats)
    ours_summary, theirs_summary = summary(*ours), summary(*theirs)
    return {
        "peer": "llama.cpp",
        "method": spec.text,
        "llama_cpp_version": LLAMA_CPP_PYTHON_VERSION,  # the binding whose vendored llama.cpp built llama-server
        "gguf": target.name,
        "draft_gguf": speculating.draft.name if speculating.draft else None,
        "llama_server": llama_server_command(speculating).shell(),
        "dtype": loaded.dtype,
        "kv_dtype": loaded.kv_dtype,
        "linear_kernels": linear_kind(loaded.model),
        "cpu_flags": reported_cpu_flags(),
        "threads": torch.get_num_threads(),
        "prompts": len(prompts),
        "prompt_tokens": [len(p) for p in prompts],
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "speculab": ours_summary,
        "llama.cpp": theirs_summary,
        "speedup_over_llamacpps": ours_summary["speedup"] / theirs_summary["speedup"],
        "speculab_over_llamacpp_tok_s": {
            "plain": ours_summary["plain_tok_s"] / theirs_summary["plain_tok_s"],
            "speculating": ours_summary["speculating_tok_s"] / theirs_summary["speculating_tok_s"],
        },
        "plain_agreement": prefix_agreement(ours[0].passes[-1].tokens, theirs[0].passes[-1].tokens),
    }
