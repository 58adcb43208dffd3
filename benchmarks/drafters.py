"""What a drafter costs and what it buys: a drafter's step against a target forward, the cost of draft models of other
shapes and the acceptance each would need, and EAGLE trees timed at batch 1.

Subcommands (``--help`` on each says more):
- ``cost``: the shipped draft model's token and the EAGLE head's tree step against one target forward;
- ``shapes``: random draft models of several shapes, each token's cost and the τ and acceptance 1.2x needs;
- ``trees``: method specs (EAGLE tree shapes) at batch 1 on held-out prompts: τ, acceptance by depth, tok/s, speedup.
Knows: the embedded model (fp32 for ``cost`` and ``shapes``, the machine's dtype for ``trees``), 1,200 tokens of
context for the costs; held-out training-share prompts for the trees. Does not know: the benchmark's workload
(``speculab bench``), training (``training.py``), batch sizes above 1.
Usage: python benchmarks/drafters.py COMMAND [options]. The last stdout line is one JSON document.
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import CONTEXT, clocked, command_line, run_subcommand, spread, subcommand
from safetensors.torch import load_file

from speculab.cpu import reported_cpu_flags
from speculab.engine import Engine
from speculab.methods import (
    DEFAULT_DRAFT,
    DEFAULT_EAGLE,
    METHODS,
    drafter_path,
    make_proposer,
    new_proposer,
    parse_method,
    proposer_options,
)
from speculab.models.draft_vocab import load_token_ranking
from speculab.models.eagle_head import load_eagle_head
from speculab.models.linear import linear_kind
from speculab.models.llama import causal_batch, prefill
from speculab.models.loading import load_model
from speculab.runtime import load
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats
from speculab.train.draft import draft_config
from speculab.train.training_prompts import held_out_prompts

TOPK, EAGLE_VOCAB, DRAFT_VOCAB = 8, 4096, 8192
# the shipped draft model at k = 3 on 8 workload prompts: 807 accepted of 6,768 drafted over 2,256 steps, measured 1.08x
# (benchmarks/results/peers/epyc-zen5-2026-12-05/speculation-draft-f32.json)
SHIPPED_TAU = (807 + 2256) / 2256


def file_parameters(folder) -> int:
    """Parameters stored in the checkpoint (prepacked modules hide theirs from .parameters(); tied ones count once)."""
    return sum(t.numel() for t in load_file(f"{folder}/model.safetensors").values())


def one_token(model, cache, token: int, **kwargs):
    """A forward of one token at position ``CONTEXT`` (the cache is not committed, so every call costs the same)."""
    return lambda: model(torch.tensor([[token]]), causal_batch(torch.arange(1), torch.tensor([CONTEXT]), 1), cache, **kwargs)


def once_ms(fn) -> float:
    return clocked(fn)[1] * 1e3


def cost(args) -> None:
    """Cost of a drafter's step against one target forward, after a 1,200-token context (fp32, batch 1).

    - draft model: one forward of one token on its own KV cache (a chain drafts one token per forward), over the whole
      vocabulary and over its 8,192 most frequent tokens (``draft_vocab``, where it ships a ranking);
    - EAGLE head: one head step over ``topk`` frontier nodes (one step of the EAGLE-2 tree), lm_head included, over
      the whole vocabulary and over the head's 4,096 most frequent tokens (``draft_vocab``).
    Medians of 20, interleaved. Folders: DRAFT_DIR EAGLE_DIR (default: the shipped drafters).
    """
    if len(args.folders) not in (0, 2):
        sys.exit("drafters.py cost: give both DRAFT_DIR and EAGLE_DIR, or neither")
    draft_dir, eagle_dir = args.folders or (DEFAULT_DRAFT, DEFAULT_EAGLE)
    target = load(None, "float32").model
    draft = load_model(draft_dir, torch.float32)
    head = load_eagle_head(eagle_dir, target)
    context = torch.randint(0, target.config.vocab_size, (CONTEXT,)).tolist()
    t_cache, d_cache, h_cache = (m.new_cache(1, CONTEXT + 64) for m in (target, draft, head))
    prefill(target, t_cache, 0, context)
    prefill(draft, d_cache, 0, context)
    h_cache.lengths[0] = CONTEXT  # the head's cache holds the context's entries (values do not change the cost)
    nodes, feats = torch.tensor([context[:TOPK]]), torch.randn(1, TOPK, target.config.hidden_size)
    ranking = load_token_ranking(eagle_dir, target.config.vocab_size)[:EAGLE_VOCAB]
    tree = {k: METHODS["eagle"].defaults[k] for k in ("num_steps", "num_draft_tokens")}  # unused here: only the logits are timed
    reduced = make_proposer("eagle", head=head, target=target, topk=TOPK, kept_token_ids=ranking, **tree)
    draft_ranking = load_token_ranking(draft_dir, target.config.vocab_size)[:DRAFT_VOCAB]
    draft_reduced = make_proposer("draft", model=draft, kept_token_ids=draft_ranking, num_speculative_tokens=1).reduced
    hb = causal_batch(torch.arange(1), torch.tensor([CONTEXT]), TOPK)
    calls = {
        "target": one_token(target, t_cache, context[0]),
        "draft": one_token(draft, d_cache, context[0]),
        "draft_reduced_vocab": one_token(draft, d_cache, context[0], lm_head=draft_reduced.logits),
        "eagle_step": lambda: head(target, nodes, feats, hb, h_cache),
        "eagle_step_reduced_vocab": lambda: reduced._logits(head.hidden(target, nodes, feats, hb, h_cache)),
    }
    runs = {name: [] for name in calls}
    with torch.no_grad():
        for _ in range(20):
            for name, call in calls.items():
                runs[name].append(clocked(call)[1])
    ms = {k: statistics.median(v) * 1e3 for k, v in runs.items()}
    result = {"context": CONTEXT, "topk": TOPK, "ms": ms}
    result |= {"draft_token_cost": ms["draft"] / ms["target"], "draft_token_reduced_vocab_cost": ms["draft_reduced_vocab"] / ms["target"]}
    result |= {"draft_model_vocab": DRAFT_VOCAB, "eagle_step_cost": ms["eagle_step"] / ms["target"]}
    result |= {"eagle_step_reduced_vocab_cost": ms["eagle_step_reduced_vocab"] / ms["target"], "draft_vocab": EAGLE_VOCAB}
    result |= {"draft_parameters": file_parameters(draft_dir), "eagle_parameters": file_parameters(eagle_dir)}
    print({k: f"{v:.2f} ms" for k, v in ms.items()}, file=sys.stderr)
    print(json.dumps(result))


def needed_acceptance(k: int, tau: float) -> float | None:
    """The acceptance a whose τ = 1 + a + ... + a^k is ``tau`` (None if even a = 1 falls short)."""
    if k + 1 < tau:
        return None
    roots = np.polynomial.Polynomial([1 - tau] + [1] * k).roots()
    # the one root in [0, 1] (τ grows with a there); found numerically, so a root at 1 may land a hair past it
    real = [float(r.real) for r in roots if abs(r.imag) < 1e-6 and -1e-6 <= r.real <= 1 + 1e-6]
    return min(1.0, max(0.0, max(real, default=0.0)))


def random_draft_cost(target, target_raw: dict, ranking, shape: str, repeats: int, t_one) -> dict:
    """A random draft model of ``shape`` (HIDDENxLAYERS) timed drafting one token, interleaved with the target."""
    import transformers

    hidden, layers = map(int, shape.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        config = transformers.LlamaConfig(**draft_config(target_raw, hidden, layers, 4 * hidden))
        transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp)
        parameters = file_parameters(tmp)  # tied: stored once
        draft = load_model(Path(tmp), torch.float32)
    context = torch.randint(0, target.config.vocab_size, (CONTEXT,)).tolist()
    cache = draft.new_cache(1, CONTEXT + 64)
    prefill(draft, cache, 0, context)
    reduced = make_proposer("draft", model=draft, kept_token_ids=ranking, num_speculative_tokens=1).reduced
    step = one_token(draft, cache, context[0], lm_head=reduced.logits)
    for _ in range(3):  # warm-up: first calls pack weights and size buffers
        step(), t_one()
    pairs = [(once_ms(step), t_one()) for _ in range(repeats)]  # interleaved with the target, so drift reaches both
    return {
        "shape": shape,
        "hidden": hidden,
        "layers": layers,
        "ms": statistics.median(p[0] for p in pairs),
        "target_ms": statistics.median(p[1] for p in pairs),
        "parameters": parameters,
    }


def shapes(args) -> None:
    """What a draft model of each shape costs a token on this CPU, and the acceptance it would need to pay.

    For each shape (hidden size, layers; 64-wide heads, one KV head, an MLP four times the width, tied embeddings, the
    target's vocabulary, bf16 weights as `speculab train draft` writes them), a random draft model is timed drafting
    one token after a 1,200-token context over its 8,192 most frequent tokens (`draft_vocab=auto`; the ranking is the
    shipped draft model's), interleaved with the target's one-token forward and its (k+1)-token verify: medians of
    ``--repeats``. Weights do not change the cost, so no training is needed for this half of the curve.

    From the costs, what each shape must reach: a step of k draft tokens costs T(k+1)/T(1) + k·c target forwards (c the
    draft token's cost) and yields τ tokens, so the speedup is τ / (T(k+1)/T(1) + k·c) and 1.2x needs
    τ = 1.2 (T(k+1)/T(1) + k·c); and the acceptance a that gives that τ if each draft token were accepted alike and
    independently (Leviathan et al.: τ = (1 - a^(k+1)) / (1 - a)). The model is checked against the shipped draft
    model (192x3), whose measured τ at k = 3 it turns into the speedup `compare llama.cpp --method draft` measured.
    """
    loaded = load(None, "float32")
    target, target_raw = loaded.model, json.loads((loaded.path / "config.json").read_text())
    context = torch.randint(0, target.config.vocab_size, (CONTEXT,)).tolist()
    t_cache = target.new_cache(1, CONTEXT + 64)
    prefill(target, t_cache, 0, context)
    many = torch.tensor([context[: args.k + 1]])
    t_one = lambda: once_ms(one_token(target, t_cache, context[0]))  # noqa: E731
    t_many = lambda: once_ms(lambda: target(many, causal_batch(torch.arange(1), torch.tensor([CONTEXT]), args.k + 1), t_cache))  # noqa: E731
    pairs = [(t_one(), t_many()) for _ in range(args.repeats + 3)][3:]  # the first three warm up
    verify = statistics.median(m / o for o, m in pairs)
    ranking = load_token_ranking(DEFAULT_DRAFT, target.config.vocab_size)[:DRAFT_VOCAB]
    rows = []
    for shape in args.shapes:
        row = random_draft_cost(target, target_raw, ranking, shape, args.repeats, t_one)
        c = row["ms"] / row["target_ms"]
        step = verify + args.k * c  # target forwards a speculating step costs
        row |= {"cost": c, "speedup_at_shipped_tau": SHIPPED_TAU / step, "tau_for_1.2x": 1.2 * step}
        row["acceptance_for_1.2x"] = needed_acceptance(args.k, 1.2 * step)
        rows.append(row)
        print(f"{shape:>7}  {row['ms']:.2f} ms  c={c:.3f}  1.2x needs tau {row['tau_for_1.2x']:.2f}", file=sys.stderr)
    record = {"context": CONTEXT, "k": args.k, "verify_cost": verify, "draft_vocab": DRAFT_VOCAB, "shipped_tau": SHIPPED_TAU}
    print(json.dumps(record | {"shapes": rows}))


def used_sources(specs) -> set[str]:
    """Every source file a drafter in ``specs`` trained on (its ``training_files.json``)."""
    used = set()
    for spec in specs:
        folder = drafter_path(spec)
        if folder and (folder / "training_files.json").exists():
            used |= set(json.loads((folder / "training_files.json").read_text()))
    return used


def with_timed_propose(proposer, spent: list[float]):
    """The proposer with its ``propose`` (the head's catch-up on accepted tokens plus the tree's growth) timed."""
    propose = proposer.propose

    def wrapper(state):
        started = time.perf_counter()
        drafts = propose(state)
        spent.append(time.perf_counter() - started)
        return drafts

    proposer.propose = wrapper
    return proposer


def batch_1_run(loaded, proposer, prompts, max_tokens: int) -> tuple[float, int, SpecStats, float]:
    """(decode seconds, tokens decoded after the first, merged stats, seconds spent drafting)."""
    spent: list[float] = []
    engine = Engine(
        loaded.model, 1, max(map(len, prompts)) + max_tokens + 64, loaded.tokenizer.stop_ids, with_timed_propose(proposer, spent)
    )
    params = SamplingParams(max_tokens=max_tokens)
    requests = engine.generate(prompts, [params] * len(prompts))
    # decode only: from each request's first token (prefill and the first token left out) to its last
    seconds = sum(r.token_times[-1] - r.token_times[0] for r in requests)
    stats = SpecStats()
    for r in requests:
        stats.merge(r.stats)
    return seconds, sum(len(r.output_ids) - 1 for r in requests), stats, sum(spent)


def tree_row(spec, rates: list[float], base: float, st: SpecStats, drafting: list[float]) -> dict:
    return {
        "method": spec.label,
        "tok_s": spread(rates, 2),
        "speedup": round(statistics.median(rates) / base, 3),
        "speedup_range": [round(min(rates) / base, 3), round(max(rates) / base, 3)],
        "tau": round(st.mean_acceptance_length, 3) if st.steps else 1.0,
        "accepted_per_position": st.accepted_per_position,
        "conditional_acceptance": [round(c, 3) for c in st.conditional_acceptance],
        "draft_tokens_per_step": round(st.draft_nodes / st.steps, 2) if st.steps else 0,
        # drafting time per tree level (catch-up included) over one plain decoding step (1 / the baseline's tok/s)
        "draft_level_cost": round(statistics.median(drafting) * base, 3),
    }


def trees(args) -> None:
    """EAGLE tree shapes at batch 1 on held-out prompts: τ, acceptance by depth, tok/s and speedup over plain decoding.

    Picks the batch-1 tree of a head without looking at the benchmark's workload: the prompts are training-share
    prompts (``DataSpec`` seed 2000) from files none of the heads trained on (their ``training_files.json``). Each
    method spec (``speculab.methods`` syntax) runs greedily at batch 1 on the embedded model in the machine's dtype;
    tok/s is the decode rate (each request from its first token to its last: prefill left out), repeats are
    interleaved, figures are medians with [min, max]. Prints a Markdown table, then the JSON document.
    """
    loaded = load(None)
    specs = [parse_method("baseline")] + [parse_method(s) for s in args.specs]
    options = {s.label: proposer_options(s, loaded) for s in specs}
    prompts = held_out_prompts(loaded.tokenizer, used_sources(specs), args.prompts, seed=2000)
    batch_1_run(loaded, new_proposer(specs[0], options[specs[0].label]), prompts[:1], 8)  # warm-up
    rates: dict[str, list[float]] = {s.label: [] for s in specs}
    drafting: dict[str, list[float]] = {s.label: [] for s in specs}  # seconds drafting per draft level
    stats: dict[str, SpecStats] = {}
    for _ in range(args.repeats):
        for spec in specs:
            seconds, tokens, st, spent = batch_1_run(loaded, new_proposer(spec, options[spec.label]), prompts, args.max_tokens)
            rates[spec.label].append(tokens / seconds)
            levels = st.steps * spec.params.get("num_steps", 0)
            drafting[spec.label].append(spent / levels if levels else 0.0)
            stats[spec.label] = st  # greedy: the same every repeat
            print(f"{spec.label}: {tokens / seconds:.1f} tok/s, tau {st.mean_acceptance_length:.2f}", file=sys.stderr, flush=True)
    base = statistics.median(rates[specs[0].label])
    rows = [tree_row(spec, rates[spec.label], base, stats[spec.label], drafting[spec.label]) for spec in specs]
    for r in rows:
        tok_s = r["tok_s"]
        cells = (f"{tok_s['median']} [{tok_s['min']}, {tok_s['max']}]", f"{r['speedup']}×", r["tau"], r["conditional_acceptance"])
        print("| " + " | ".join(str(c) for c in (r["method"], *cells, r["draft_level_cost"])) + " |")
    record = {"prompts": len(prompts), "max_tokens": args.max_tokens, "repeats": args.repeats, "dtype": loaded.dtype}
    print(json.dumps(record | {"linear_kernels": linear_kind(loaded.model), "cpu_flags": reported_cpu_flags(), "rows": rows}))


def main() -> None:
    parser, sub = command_line(__doc__)
    subcommand(sub, "cost", cost).add_argument("folders", nargs="*", metavar="DIR", help="DRAFT_DIR EAGLE_DIR")
    p = subcommand(sub, "shapes", shapes)
    p.add_argument("--shapes", nargs="+", default=["128x2", "192x3", "256x3", "384x4", "512x4", "576x6"])
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--repeats", type=int, default=15)
    p = subcommand(sub, "trees", trees)
    p.add_argument("--specs", nargs="+", required=True)
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    run_subcommand(parser)


if __name__ == "__main__":
    main()
