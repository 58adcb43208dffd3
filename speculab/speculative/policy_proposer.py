"""The proposer that applies a speculation policy: each request's draft cut to its draft budget at this step's load.

Knows: the running batch's size, each request's context length (its prompt and output so far) and its drafted and
accepted counts (its ``SpecStats``). A budget only ever shortens a draft (a chain's prefix, a tree's first nodes,
whose parents come before them), so verification sees fewer nodes and accepts what the target would have produced:
lossless, whatever the policy and whenever the budget changes. Does not know: costs, or how the inner proposer
drafts (it is told the budgets in ``ProposeState.draft_budgets`` and may draft less; it need not). The policy itself
is ``speculab/policy/``.
"""

from __future__ import annotations

from collections import deque

from speculab.policy.table import Load, SpeculationPolicy
from speculab.speculative.proposer import Proposer, ProposeState, WrappedProposer
from speculab.speculative.tree import Draft


class PolicyProposer(WrappedProposer):
    """Wraps a proposer and cuts each request's draft to its budget under a ``SpeculationPolicy``, and to the budgets
    of a proposer that wraps this one (the tuner's); everything else is the inner proposer's (admit, observe, move and
    release always reach it, so it stays current through plain steps)."""

    def __init__(self, inner: Proposer, policy: SpeculationPolicy):
        super().__init__(inner)
        self.policy = policy
        self._seen: dict[int, tuple[int, int]] = {}  # slot -> its request's (draft nodes, accepted tokens) last step
        self._recent: dict[int, deque] = {}  # slot -> (drafted, accepted) of its request's last `window` drafted steps

    def budgets(self, requests: list) -> list[int | None]:
        """Each request's draft budget this step (None: none)."""
        return [self._budget(r, Load(len(requests), len(r.prompt_ids) + len(r.output_ids))) for r in requests]

    def _budget(self, request, load: Load) -> int | None:
        budget = self.policy.draft_budget(load)
        drafted, accepted = request.stats.draft_nodes, request.stats.accepted_tokens
        before = self._seen.get(request.slot, (0, 0))
        recent = self._recent.setdefault(request.slot, deque(maxlen=self.policy.window))
        if drafted > before[0]:
            recent.append((drafted - before[0], accepted - before[1]))
        self._seen[request.slot] = (drafted, accepted)
        total = sum(d for d, _ in recent)
        starved = len(recent) == self.policy.window and sum(a for _, a in recent) < self.policy.min_acceptance * total
        if not starved:
            return budget
        return smaller(budget, self.policy.probe_nodes)

    def propose(self, state: ProposeState) -> list[Draft]:
        budgets = self.budgets(state.requests)
        if state.draft_budgets is not None:  # a policy wrapping this one cuts the drafts too
            budgets = [smaller(mine, outer) for mine, outer in zip(budgets, state.draft_budgets, strict=True)]
        if all(b == 0 for b in budgets):
            return [Draft.empty() for _ in state.requests]
        drafts = self.inner.propose(ProposeState(state.requests, budgets))
        return [d if b is None else d.first(b) for d, b in zip(drafts, budgets, strict=True)]

    def _forget(self, slot: int) -> None:
        self._seen.pop(slot, None)
        self._recent.pop(slot, None)

    def admit(self, slot: int, request, features=None) -> None:
        self._forget(slot)
        self.inner.admit(slot, request, features)

    def admit_cached(self, slot: int, request, features, state) -> None:
        self._forget(slot)
        self.inner.admit_cached(slot, request, features, state)

    def move(self, src: int, dst: int) -> None:
        self._forget(dst)
        if src in self._seen:
            self._seen[dst], self._recent[dst] = self._seen.pop(src), self._recent.pop(src)
        self.inner.move(src, dst)

    def release(self, slot: int) -> None:
        self._forget(slot)
        self.inner.release(slot)


def smaller(a: int | None, b: int | None) -> int | None:
    """The smaller of two budgets, None meaning none."""
    return a if b is None else b if a is None else min(a, b)
