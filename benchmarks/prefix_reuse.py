"""An agent's turns served with and without the prompt cache: each turn's time to first token after the earlier turns
were cached, against the same turn cold, and the share of its prompt the cache held.

Subcommands (``--help`` on each says more):
- ``turns``: the shipped multi-turn agent sessions (``--workload sessions``: files of one language, then turn after
  turn of edits, each resending everything so far). For each session, turn by turn: the turn cold (an engine with no
  prompt cache) and the turn on the session's engine, whose prompt cache (capped as ``speculab serve``'s) holds its
  earlier turns, taking turns ABBA from turn to turn; each alone, nothing else running, so its first token is its
  prefill's (the whole rest of the prompt at once, as ``PacedChunks`` runs a prompt when no stream runs).
Knows: the engine's clock, the sessions' turns as the workload gives them. Does not know: HTTP (``speculab serve`` runs
this engine with this cache), or how a cache entry is found (``prompt_cache.py``).
Usage: python benchmarks/prefix_reuse.py turns [--sessions 2] [--method eagle]. The last stdout line is one JSON document.
"""

from __future__ import annotations

import json
import time
from itertools import groupby

from common import command_line, run_record, run_subcommand, spread, subcommand

from speculab import runtime
from speculab.bench.workload import load_workload
from speculab.chunked_prefill import PacedChunks
from speculab.engine import Engine
from speculab.free_memory import GIB
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.prompt_cache import PromptCache
from speculab.sampling import SamplingParams

POSITIONS = 8192  # the embedded model's


def first_token(engine: Engine, ids: list[int]) -> tuple[float, int]:
    """Seconds from adding ``ids`` to its first token on ``engine``, and the prompt tokens the cache held."""
    request = engine.add_request(ids, SamplingParams(max_tokens=1, ignore_eos=True))
    while not request.output_ids:
        engine.step()
    return request.token_times[0] - request.arrival_time, request.cached_tokens


def session_rounds(loaded, proposer_of, turns: list[list[int]], cap: int) -> list[dict]:
    """Each turn of one session: cold and cached, in ABBA order from turn to turn."""
    cached = Engine(loaded.model, 1, POSITIONS, loaded.tokenizer.stop_ids, proposer_of(), PromptCache(cap), chunked_prefill=PacedChunks())
    rows = []
    for n, ids in enumerate(turns):
        cold = Engine(loaded.model, 1, POSITIONS, loaded.tokenizer.stop_ids, proposer_of(), chunked_prefill=PacedChunks())
        order = ("cold", "cached") if n % 2 == 0 else ("cached", "cold")
        got = {which: first_token(cold if which == "cold" else cached, ids) for which in order}
        rows.append(
            {
                "turn": n + 1,
                "prompt_tokens": len(ids),
                "cold_ttft_s": got["cold"][0],
                "cached_ttft_s": got["cached"][0],
                "ttft_ratio": got["cached"][0] / got["cold"][0],
                "hit_share": got["cached"][1] / len(ids),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def turns(args) -> None:
    """Each turn of ``--sessions`` sessions (alternating languages), cold and after its earlier turns."""
    loaded = runtime.load(None, None)
    spec = parse_method(args.method)
    options = proposer_options(spec, loaded)
    sessions = [list(items) for _, items in groupby(load_workload("sessions"), key=lambda item: item.id.rsplit("/turn-", 1)[0])]
    chosen = [s for pair in zip(sessions[: len(sessions) // 2], sessions[len(sessions) // 2 :]) for s in pair][: args.sessions]
    started, rows = time.perf_counter(), []
    for session in chosen:
        ids = [loaded.tokenizer.encode_chat(item.message_dicts()) for item in session]
        rows += [
            {"session": session[0].id} | r
            for r in session_rounds(loaded, lambda: new_proposer(spec, options), ids, int(args.cache_gib * GIB))
        ]
    later = [r for r in rows if r["turn"] > 1]
    result = {
        **run_record(),
        "method": spec.label,
        "seconds": round(time.perf_counter() - started, 1),
        "turns": rows,
        "later_turns": {k: spread([r[k] for r in later], 3) for k in ("ttft_ratio", "hit_share", "cold_ttft_s", "cached_ttft_s")},
    }
    print(json.dumps(result))


def main() -> None:
    parser, commands = command_line(__doc__)
    p = subcommand(commands, "turns", turns)
    p.add_argument("--sessions", type=int, default=2, help="sessions measured, the languages in turn")
    p.add_argument("--method", default="eagle", help="as `speculab serve --method` takes it")
    p.add_argument("--cache-gib", type=float, default=2.0, help="the prompt cache's cap (`speculab serve --prefix-cache-gib`)")
    run_subcommand(parser)


if __name__ == "__main__":
    main()
