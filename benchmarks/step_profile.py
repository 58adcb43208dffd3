"""Where a speculative step's time goes: drafting, building the verify batch, the verify forward, accepting and
committing, counted in plain decoding steps at the same batch size and context.

Subcommands (``--help`` on each says more):
- ``phases``: for each context and batch size, a plain engine and one engine per method decode the same requests
  side by side, in rounds, each method's engine beside the plain one; inside a method's steps the engine's own calls
  are timed (the proposer's ``propose``, ``_verify_batch``, the target's forward, ``_commit_row``), and an EAGLE
  proposer's ``_catch_up`` (feeding the head the tokens the last step accepted) and ``_rerank`` (choosing the tree's
  nodes) inside its draft.
Knows: the engine's step as ``engine.py`` runs it (timed by wrapping the bound methods of one engine instance, so the
engine runs its own code), the benchmark's context axis (``bench/contexts.py``: the workload's requests after
repository files). Does not know: why a phase costs what it does (``forward.py``, ``drafters.py`` and the kernels'
benchmarks say that).
Usage: python benchmarks/step_profile.py phases [--contexts workload 6k] [--batch-sizes 1 16]. The last stdout line is
one JSON document.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections import defaultdict

from common import command_line, run_record, run_subcommand, spread, subcommand

from speculab import runtime
from speculab.bench.contexts import Lengthener, context_key, parse_context
from speculab.bench.workload import load_workload
from speculab.engine import Engine
from speculab.free_memory import GIB
from speculab.methods import new_proposer, parse_method, proposer_options_of
from speculab.prompt_cache import PromptCache
from speculab.sampling import SamplingParams

PHASES = ("draft", "tree", "verify", "commit")
DRAFT_PARTS = {"_catch_up": "draft: catch-up", "_rerank": "draft: rerank"}


class PhaseClock:
    """Seconds spent in each wrapped call since the last ``take``."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, owner, name: str, phase: str) -> None:
        """Time ``owner.name`` (an instance's bound method) as ``phase`` from now on."""
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - began

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        out, self.seconds = dict(self.seconds), defaultdict(float)
        return out


def timed_engine(engine: Engine) -> PhaseClock:
    """The engine's step phases, timed from now on (after its prefills: the target's forward is then the verify's)."""
    clock = PhaseClock()
    clock.wrap(engine.proposer, "propose", "draft")
    clock.wrap(engine, "_verify_batch", "tree")
    clock.wrap(engine.model, "forward_parts", "verify")
    clock.wrap(engine, "_commit_row", "commit")
    inner = getattr(engine.proposer, "inner", engine.proposer)  # under a policy, the drafter it wraps
    for name, phase in DRAFT_PARTS.items():
        if hasattr(inner, name):
            clock.wrap(inner, name, phase)
    return clock


def started_engine(loaded, proposer, prompts: list[list[int]], cache: PromptCache, room: int) -> Engine:
    """An engine with ``prompts`` prefilled (heads from ``cache``) and decoding, one step in."""
    positions = max(map(len, prompts)) + room
    engine = Engine(loaded.model, len(prompts), positions, loaded.tokenizer.stop_ids, proposer, cache)
    for ids in prompts:
        engine.add_request(ids, SamplingParams(max_tokens=room - 64, ignore_eos=True))  # the rest: a draft's headroom
    while engine.waiting or not engine.running:
        engine.step()
    return engine


def steps(engine: Engine, clock: PhaseClock | None, n: int) -> list[dict]:
    """``n`` steps: each one's seconds, its phases' and the tokens it emitted."""
    if clock is not None:
        clock.take()  # the wrapped forward is the model's, and another engine may have run it since
    out = []
    for _ in range(n):
        began = time.perf_counter()
        emitted = sum(len(e.token_ids) for e in engine.step())
        row = {"step": time.perf_counter() - began, "tokens": emitted}
        out.append(row | (clock.take() if clock else {}))
    return out


def profile_cell(loaded, specs, options, prompts, args) -> dict:
    """Every method's phases at one (context, batch), each method's rounds taking turns with a plain engine's."""
    cache = PromptCache(int(args.cache_gib * GIB))
    plain = started_engine(loaded, None, prompts, cache, args.room)
    cell = {}
    for spec in specs:
        engine = started_engine(loaded, new_proposer(spec, options[spec.label]), prompts, cache, args.room)
        clock = timed_engine(engine)
        steps(plain, None, 2), steps(engine, clock, 2)  # warm-up: buffers sized, weights packed
        rounds = {"plain": [], "method": []}
        for r in range(args.rounds):
            for which in ("plain", "method") if r % 2 == 0 else ("method", "plain"):
                rounds[which].append(steps(plain, None, args.steps) if which == "plain" else steps(engine, clock, args.steps))
        cell[spec.label] = phase_figures(rounds)
        print(json.dumps({spec.label: cell[spec.label]}), file=sys.stderr, flush=True)
        del engine, clock  # the clock's wrappers hold the engine: both go before the next one is sized
        gc.collect()
    return cell


def phase_figures(rounds: dict[str, list[list[dict]]]) -> dict:
    """Per round: the plain step's median seconds, and each phase's median per method step in plain steps; then the
    median over rounds with its spread."""
    per_round = defaultdict(list)
    for plain, method in zip(rounds["plain"], rounds["method"]):
        unit = statistics.median(s["step"] for s in plain)
        per_round["plain_step_ms"].append(unit * 1e3)
        per_round["step"].append(statistics.median(s["step"] for s in method) / unit)
        per_round["tokens_per_step"].append(sum(s["tokens"] for s in method) / sum(s["tokens"] for s in plain))
        for phase in (*PHASES, *DRAFT_PARTS.values()):
            if any(phase in s for s in method):
                per_round[phase].append(statistics.median(s.get(phase, 0.0) for s in method) / unit)
        parts = [statistics.median(s.get(p, 0.0) for s in method) for p in PHASES]
        per_round["rest"].append((statistics.median(s["step"] for s in method) - sum(parts)) / unit)
    return {k: spread(v, 3) for k, v in per_round.items()}


def phases(args) -> None:
    """The phases of a speculative step for ``--methods`` at each of ``--contexts`` and ``--batch-sizes``, in plain
    steps (the plain engine's median step at the same batch and context, timed in turns with it, ``--rounds`` rounds of
    ``--steps`` steps). A row's ``step`` is the method's whole step; ``tokens_per_step`` its tokens a step over the
    plain engine's (tau, the bonus included); ``rest``: the step less its four phases (the engine's bookkeeping)."""
    loaded = runtime.load(None, None)
    specs = [parse_method(m) for m in args.methods]
    options = proposer_options_of(specs, loaded)
    items = [i for i in load_workload() if i.language == args.language]
    lengthen = Lengthener.from_pool(loaded.tokenizer)
    result = run_record() | {"cells": {}}
    for context in map(parse_context, args.contexts):
        for batch in args.batch_sizes:
            chosen = [lengthen.at(item, context) for item in items[:batch]]
            prompts = [loaded.tokenizer.encode_chat(item.message_dicts()) for item in chosen]
            key = f"{context_key(context)} x {batch}"
            result["cells"][key] = {"prompt_tokens": statistics.median(map(len, prompts))}
            result["cells"][key] |= profile_cell(loaded, specs, options, prompts, args)
    print(json.dumps(result))


def main() -> None:
    parser, commands = command_line(__doc__)
    p = subcommand(commands, "phases", phases)
    p.add_argument("--methods", nargs="+", default=["eagle", "eagle3", "draft"], help="as `speculab bench --methods`")
    p.add_argument("--contexts", nargs="+", default=["workload", "6k"], help="as `speculab bench --contexts`")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    p.add_argument("--language", default="python", help="the workload's requests of one language (their files shared)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=12, help="steps a round")
    p.add_argument("--room", type=int, default=320, help="positions after the longest prompt (output and drafts)")
    p.add_argument("--cache-gib", type=float, default=1.0, help="the prompt cache sharing the prompts' heads")
    run_subcommand(parser)


if __name__ == "__main__":
    main()
