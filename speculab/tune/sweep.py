"""The measured runs behind a cost model: an engine kept full at one batch size, every decode step timed.

A *sweep* gives every request one of the candidate draft budgets for a block of steps, the budgets taking turns, so
each budget sees the same requests at the same context lengths; a *check* runs the chosen policy as it will run. Only
*clean* steps count: the batch full, nobody admitted (a prefill would be timed with the step) and nobody finished
(a request's last step is cut at its max_tokens). The first step of each block is timed but not kept: it pays for the
previous budget (a draft model catching up after a plain step).

Knows: the engine's step, the proposer wrappers (``PolicyProposer``), the clock. Does not know: what the figures
mean (``cost_model.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from speculab.engine import Engine, sequence_length
from speculab.policy.table import SpeculationPolicy
from speculab.prompt_cache import PromptCache
from speculab.sampling import SamplingParams
from speculab.speculative.policy_proposer import PolicyProposer
from speculab.speculative.proposer import ProposeState
from speculab.speculative.tree import Draft

BLOCK = 4  # steps a budget keeps before the next takes its turn (the first of them not timed)


@dataclass(frozen=True)
class Step:
    batch_size: int
    budget: int | None  # the draft nodes each request might have (None: the check run's policy decided)
    seconds: float  # the whole engine step
    propose_seconds: float  # drafting alone
    emitted: tuple[int, ...]  # tokens each request took from the step (accepted + the bonus or recovered token)
    drafted: tuple[int, ...]  # draft nodes each request had
    domains: tuple[str, ...]  # each request's workload domain, row for row


class TimedProposer(PolicyProposer):
    """A policy proposer whose budgets can be set from outside each step (``budget``; None: its policy's) and whose
    drafting time and each row's draft nodes are kept (``last_seconds``, ``last_nodes``)."""

    def __init__(self, inner, policy: SpeculationPolicy | None = None):
        super().__init__(inner, policy or SpeculationPolicy())
        self.budget: int | None = None
        self.last_seconds = 0.0
        self.last_nodes: list[int] = []

    def budgets(self, requests: list) -> list[int | None]:
        return super().budgets(requests) if self.budget is None else [self.budget] * len(requests)

    def propose(self, state: ProposeState) -> list[Draft]:
        began = time.perf_counter()
        drafts = super().propose(state)
        self.last_seconds = time.perf_counter() - began
        self.last_nodes = [len(d) for d in drafts]
        return drafts


@dataclass(frozen=True)
class Run:
    """What one measured run decodes: ``prompts`` (token ids) with their ``domains``, at ``batch_size``."""

    prompts: list[list[int]]
    domains: list[str]
    batch_size: int
    max_tokens: int


def run_steps(
    model, stop_ids, proposer: TimedProposer, run: Run, cache: PromptCache | None, budget_of: Callable[[int], int | None]
) -> list[Step]:
    """Every clean decode step of ``run``; ``budget_of(i)`` sets the budget of the i-th decode step (None: the
    policy's)."""
    max_len = sequence_length(max(map(len, run.prompts)), run.max_tokens, proposer)
    engine = Engine(model, run.batch_size, max_len, stop_ids, proposer, cache)
    params = SamplingParams(max_tokens=run.max_tokens, ignore_eos=True)
    domain_of = {engine.add_request(ids, params).id: d for ids, d in zip(run.prompts, run.domains)}
    steps, decoded, previous = [], 0, None
    # once nobody waits and a request has finished, the batch is never full again: the rest is not run
    while engine.has_work and (engine.waiting or len(engine.running) == run.batch_size):
        proposer.budget = budget_of(decoded) if engine.running else None
        decoded += bool(engine.running)
        full, waiting = len(engine.running) == run.batch_size, len(engine.waiting)
        began = time.perf_counter()
        events = engine.step()
        seconds = time.perf_counter() - began
        clean = full and waiting == len(engine.waiting) and not any(e.finished for e in events)
        if clean and (proposer.budget is None or proposer.budget == previous):
            emitted, domains = tuple(len(e.token_ids) for e in events), tuple(domain_of[e.request.id] for e in events)
            steps.append(
                Step(run.batch_size, proposer.budget, seconds, proposer.last_seconds, emitted, tuple(proposer.last_nodes), domains)
            )
        previous = proposer.budget if full else None
    return steps


def cycling_budgets(budgets: list[int]) -> Callable[[int], int]:
    """Blocks of ``BLOCK`` steps per budget, the budgets taking turns."""
    return lambda step: budgets[(step // BLOCK) % len(budgets)]
