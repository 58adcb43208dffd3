"""A speculation policy: how many draft nodes each request may have in a step, and the proposer that applies it.

A verify's extra tokens are nearly free while a step is memory-bound (small batches) and cost their full price once
it is compute-bound, and a request whose drafts keep being rejected pays for them at any batch size. A policy says,
for the running batch's size, the most draft nodes a request may have (0: decode plainly), and shrinks a request's
drafts to ``probe_nodes`` while its own acceptance over its last ``window`` steps is below ``min_acceptance``.
"Speculate less as the batch grows" is this one table, whether it comes from a file (``policy=FILE``), from
``speculab tune`` (``policy=auto``) or from a method parameter that presets it (``batch_budget``,
``disable_by_batch_size``); a method with several gets, at each batch size, the smallest of their caps.

Knows: the running batch's size and each request's drafted and accepted counts (its ``SpecStats``). A policy only
ever shortens a draft (a chain's prefix, a tree's first nodes, whose parents come before them), so verification sees
fewer nodes and accepts what the target would have produced: lossless, whatever the policy and whenever it changes.
Does not know: costs (a tuner writes the table; the file is JSON, ``SpeculationPolicy.to_dict``), or how the inner
proposer drafts (it is told the caps in ``ProposeState.max_draft_nodes`` and may draft less; it need not).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

from speculab.speculative.proposer import Proposer, ProposeState, WrappedProposer
from speculab.speculative.tree import Draft

AUTO = "auto"  # a method's ``policy`` naming what ``speculab tune`` chose for this machine, target and method


@dataclass(frozen=True)
class SpeculationPolicy:
    # (smallest batch size, most draft nodes a request may have), ascending; below the first entry: no cap
    by_batch_size: tuple[tuple[int, int], ...] = ()
    min_acceptance: float = 0.0  # accepted / drafted nodes over a request's last `window` drafted steps
    window: int = 8
    probe_nodes: int = 1  # a request below min_acceptance keeps drafting this many, so it can recover

    def __post_init__(self) -> None:
        sizes = [b for b, _ in self.by_batch_size]
        if sizes != sorted(set(sizes)) or any(b < 1 for b in sizes):
            raise ValueError(f"by_batch_size: batch sizes must be distinct, ascending and >= 1, got {sizes}")
        if any(n < 0 for _, n in self.by_batch_size):
            raise ValueError("by_batch_size: draft nodes must be >= 0")
        if not 0.0 <= self.min_acceptance <= 1.0:
            raise ValueError(f"min_acceptance must be in [0, 1], got {self.min_acceptance}")
        if self.window < 1 or self.probe_nodes < 0:
            raise ValueError("window must be >= 1 and probe_nodes >= 0")

    @classmethod
    def batch_budget(cls, budget: int) -> SpeculationPolicy:
        """About ``budget`` draft nodes a step shared by the batch: ``budget // batch size`` a request, at least one.
        At batch sizes where a verify step's extra tokens are no longer free, an EAGLE tree so capped narrows towards
        a short chain (``EagleProposer.tree_shape``)."""
        if budget < 1:
            raise ValueError("batch_budget must be at least 1")
        table: list[tuple[int, int]] = []
        for batch_size in range(1, budget + 1):
            nodes = max(1, budget // batch_size)
            if not table or table[-1][1] != nodes:
                table.append((batch_size, nodes))
        return cls(tuple(table))

    @classmethod
    def disable_by_batch_size(cls, max_batch_size: int) -> SpeculationPolicy:
        """Speculation while at most ``max_batch_size`` requests run, plain decoding above (vLLM v0's
        ``speculative_disable_by_batch_size``; the benchmark's break-even batch size says where to set it)."""
        if max_batch_size < 1:
            raise ValueError("disable_by_batch_size must be at least 1")
        return cls(((max_batch_size + 1, 0),))

    @classmethod
    def from_caps(cls, caps: dict[int, int]) -> SpeculationPolicy:
        """Each measured batch size's cap, holding from that batch size up to the next measured one (a tuner's
        choice, ``{batch size: draft nodes}``)."""
        table: list[tuple[int, int]] = []
        for batch_size, nodes in sorted(caps.items()):
            if not table or table[-1][1] != nodes:
                table.append((batch_size, nodes))
        return cls(tuple(table))

    def capped_by(self, other: SpeculationPolicy) -> SpeculationPolicy:
        """This policy under ``other``'s batch table too: at each batch size the smaller cap of the two. ``other`` is a
        batch table alone (a preset): two acceptance floors would not say which one holds."""
        if other.min_acceptance:
            raise ValueError("only one of the policies combined may set min_acceptance")
        sizes = sorted({b for b, _ in self.by_batch_size} | {b for b, _ in other.by_batch_size})
        caps = [(b, _smaller(self.batch_cap(b), other.batch_cap(b))) for b in sizes]
        return replace(self, by_batch_size=tuple(entry for i, entry in enumerate(caps) if i == 0 or caps[i - 1][1] != entry[1]))

    def batch_cap(self, batch_size: int) -> int | None:
        """The most draft nodes a request may have at this batch size; None: no cap."""
        cap = None
        for smallest, nodes in self.by_batch_size:
            if batch_size >= smallest:
                cap = nodes
        return cap

    def ranges(self) -> list[list[int]]:
        """The batch table as inclusive ranges from batch size 1, ``[[first, last, draft nodes], ...]``, the last
        range's nodes holding beyond it (vLLM's ``num_speculative_tokens_per_batch_size``); below the table's first
        entry there is no cap, written as the table's most."""
        table = list(self.by_batch_size)
        if not table or table[0][0] != 1:
            table.insert(0, (1, max((n for _, n in table), default=0)))
        ends = [b - 1 for b, _ in table[1:]] + [table[-1][0]]
        return [[b, end, n] for (b, n), end in zip(table, ends)]

    def to_dict(self) -> dict:
        return {
            "by_batch_size": {str(b): n for b, n in self.by_batch_size},
            "min_acceptance": self.min_acceptance,
            "window": self.window,
            "probe_nodes": self.probe_nodes,
        }

    @classmethod
    def from_dict(cls, raw: dict) -> SpeculationPolicy:
        unknown = set(raw) - {"by_batch_size", "min_acceptance", "window", "probe_nodes"}
        if unknown:
            raise ValueError(f"unknown policy keys: {', '.join(sorted(unknown))}")
        table = raw.get("by_batch_size", {})
        if not isinstance(table, dict):
            raise ValueError('by_batch_size must be an object {"batch size": draft nodes}')
        try:
            pairs = tuple(sorted((int(b), int(n)) for b, n in table.items()))
        except (TypeError, ValueError):
            raise ValueError("by_batch_size: batch sizes and draft nodes must be integers") from None
        return cls(pairs, float(raw.get("min_acceptance", 0.0)), int(raw.get("window", 8)), int(raw.get("probe_nodes", 1)))

    @classmethod
    def from_file(cls, path: str | Path) -> SpeculationPolicy:
        try:
            raw = json.loads(Path(path).read_text())
            if not isinstance(raw, dict):
                raise ValueError("a policy file holds one JSON object")
            return cls.from_dict(raw)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None


class PolicyProposer(WrappedProposer):
    """Wraps a proposer and caps each request's draft by a ``SpeculationPolicy``, and by the caps of a proposer that
    wraps this one (the tuner's); everything else is the inner proposer's (admit, observe, move and release always
    reach it, so it stays current through plain steps)."""

    def __init__(self, inner: Proposer, policy: SpeculationPolicy):
        super().__init__(inner)
        self.policy = policy
        self._seen: dict[int, tuple[int, int]] = {}  # slot -> its request's (draft nodes, accepted tokens) last step
        self._recent: dict[int, deque] = {}  # slot -> (drafted, accepted) of its request's last `window` drafted steps

    def caps(self, requests: list) -> list[int | None]:
        """Each request's most draft nodes this step (None: no cap)."""
        batch_cap = self.policy.batch_cap(len(requests))
        return [self._cap(r, batch_cap) for r in requests]

    def _cap(self, request, batch_cap: int | None) -> int | None:
        drafted, accepted = request.stats.draft_nodes, request.stats.accepted_tokens
        before = self._seen.get(request.slot, (0, 0))
        recent = self._recent.setdefault(request.slot, deque(maxlen=self.policy.window))
        if drafted > before[0]:
            recent.append((drafted - before[0], accepted - before[1]))
        self._seen[request.slot] = (drafted, accepted)
        total = sum(d for d, _ in recent)
        starved = len(recent) == self.policy.window and sum(a for _, a in recent) < self.policy.min_acceptance * total
        if not starved:
            return batch_cap
        return self.policy.probe_nodes if batch_cap is None else min(batch_cap, self.policy.probe_nodes)

    def propose(self, state: ProposeState) -> list[Draft]:
        caps = self.caps(state.requests)
        if state.max_draft_nodes is not None:  # a policy wrapping this one caps the drafts too
            caps = [_smaller(c, outer) for c, outer in zip(caps, state.max_draft_nodes, strict=True)]
        if all(c == 0 for c in caps):
            return [Draft.empty() for _ in state.requests]
        drafts = self.inner.propose(ProposeState(state.requests, caps))
        return [d if c is None else d.first(c) for d, c in zip(drafts, caps, strict=True)]

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


def _smaller(a: int | None, b: int | None) -> int | None:
    """The smaller of two caps, None meaning no cap."""
    return a if b is None else b if a is None else min(a, b)
