"""``speculab tune``'s runs, in order: warm the prompt cache, sweep the budgets at each batch size, check the policy.

Knows: the loaded target, the method's proposer options, the prompts, how many requests each batch size needs
for enough clean steps per budget, and which batch sizes' engines the memory free now can hold (the others are not
measured, and say why). Does not know: the cost arithmetic (``cost_model.py``) or the command line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from tqdm import tqdm

from speculab.engine import Engine, engine_bytes, sequence_length
from speculab.free_memory import MemoryShortfall, require
from speculab.methods import MethodSpec, new_proposer
from speculab.policy.table import SpeculationPolicy
from speculab.prompt_cache import PromptCache
from speculab.sampling import SamplingParams
from speculab.tune.cost_model import mean, standard_error
from speculab.tune.sweep import BLOCK, Run, Step, TimedProposer, cycling_budgets, run_steps

COVER = 12  # every run takes at least this many prompts: three of each domain
TIMED_BLOCKS = 3  # per budget and batch size, at least: each block's first step is not timed


@dataclass
class Tuning:
    """What every run shares: the target, the method (without a policy: the tuner sets the budgets) and its options,
    the prompts of one context (token ids and domains)."""

    loaded: object
    spec: MethodSpec
    options: dict
    prompts: list[list[int]]
    domains: list[str]
    max_tokens: int
    progress: bool = True
    skipped: dict[int, str] = field(default_factory=dict)  # batch size -> why memory could not hold its engine
    at: str = ""  # the prompts' context, named in the progress bars (" at 4096 (4071 tokens)"; "": the only one)

    def with_prompts(self, prompts: list[list[int]], domains: list[str], at: str = "") -> Tuning:
        """The same target and method with another context's prompts (and nothing skipped yet)."""
        return replace(self, prompts=prompts, domains=domains, skipped={}, at=at)

    def proposer(self, policy: SpeculationPolicy | None = None) -> TimedProposer:
        return TimedProposer(new_proposer(self.spec, self.options), policy)

    def fits(self, batch_size: int) -> bool:
        """Whether an engine at ``batch_size`` fits in the memory free now; one that does not is kept in ``skipped``
        with its bytes, and its batch size is not measured (``free_memory``)."""
        proposer = self.proposer()
        length = sequence_length(max(map(len, self.prompts)), self.max_tokens, proposer)
        try:
            require(
                engine_bytes(self.loaded.model, batch_size, length, proposer), f"batch {batch_size}", self.loaded.model.norm.weight.device
            )
        except MemoryShortfall as e:
            self.skipped[batch_size] = str(e)
            return False
        return True

    def run(self, batch_size: int, steps_wanted: int) -> Run:
        """The prompts in turn, as many requests as give about ``steps_wanted`` decode steps at ``batch_size``
        (a request takes about max_tokens / 2 steps), and at least the first COVER prompts once (each domain)."""
        n = max(min(len(self.prompts), COVER), math.ceil(steps_wanted * batch_size * 2 / self.max_tokens))
        n = math.ceil(n / batch_size) * batch_size
        picked = [i % len(self.prompts) for i in range(n)]
        return Run([self.prompts[i] for i in picked], [self.domains[i] for i in picked], batch_size, self.max_tokens)


def warm_prompt_cache(t: Tuning) -> PromptCache:
    """Every prompt's prefill, the target's and the drafter's, once (a sweep then times decoding, not prefill)."""
    lm, cache = t.loaded, PromptCache()
    engine = Engine(lm.model, 1, max(map(len, t.prompts)) + t.max_tokens + 64, lm.tokenizer.stop_ids, t.proposer(), cache)
    for ids in tqdm(t.prompts, desc=f"prefill (prompt cache){t.at}", unit="prompt", disable=not t.progress):
        engine.generate([ids], SamplingParams(max_tokens=2, ignore_eos=True))
    return cache


def sweep(t: Tuning, cache: PromptCache, batch_sizes: list[int], budgets: list[int]) -> list[Step]:
    """Clean steps at every batch size, each budget in turn for ``BLOCK`` steps."""
    steps: list[Step] = []
    for b in tqdm(batch_sizes, desc=f"sweep {t.spec.name}{t.at}: budgets {budgets}", unit="batch size", disable=not t.progress):
        if not t.fits(b):
            continue
        run = t.run(b, len(budgets) * BLOCK * (TIMED_BLOCKS + 1))
        steps += run_steps(t.loaded.model, t.loaded.tokenizer.stop_ids, t.proposer(), run, cache, cycling_budgets(budgets))
    return steps


def check(t: Tuning, cache: PromptCache, batch_sizes: list[int], policy: SpeculationPolicy, steps_wanted: int) -> dict[int, dict]:
    """Each batch size run under ``policy`` as it will run: measured tok/s (clean steps' tokens over their time)."""
    measured = {}
    for b in tqdm(batch_sizes, desc=f"check the policy{t.at}", unit="batch size", disable=not t.progress):
        if b in t.skipped:
            continue
        steps = run_steps(t.loaded.model, t.loaded.tokenizer.stop_ids, t.proposer(policy), t.run(b, steps_wanted), cache, lambda i: None)
        seconds = sum(s.seconds for s in steps)
        measured[b] = {
            "steps": len(steps),
            "tok_s": sum(sum(s.emitted) for s in steps) / seconds if seconds else 0.0,
            "tok_s_se": standard_error([sum(s.emitted) / s.seconds for s in steps if s.seconds]),  # of a step's rate
            "tau": mean(n for s in steps for n in s.emitted),
        }
    return measured
