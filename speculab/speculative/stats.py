"""Speculation statistics, per request and in aggregate, in vLLM's terms.

- ``steps``: verify steps (target forwards after prefill).
- ``drafts``: steps whose draft was not empty.
- ``draft_nodes``: draft nodes proposed (a tree counts all its nodes; vLLM's ``num_draft_nodes``;
  ``draft_tokens`` in results files and cards).
- ``drafted_depth``: draft tokens along the verified depth, summed over steps
  (a chain of k counts k; a tree counts its depth): the most that could be accepted
  (vLLM's ``num_draft_tokens``).
- ``accepted_tokens``: draft tokens accepted.
- ``accepted_per_position[i]``: steps that accepted a token at depth i+1.
- ``drafted_per_position[i]``: steps whose draft reached depth i+1.
- ``reached_per_position[i]``: steps whose draft reached depth i+1 with every
  shallower depth accepted: the steps on which depth i+1 was put to the test.
- ``conditional_acceptance[i]`` = accepted / reached at depth i+1: the
  acceptance at depth d given depth d-1 was accepted, which shows where τ is lost.
- ``mean_acceptance_length`` (τ): tokens emitted per verify step, the bonus
  token included: (accepted_tokens + steps) / steps. Plain decoding has τ = 1.
- ``acceptance_rate``: accepted_tokens / drafted_depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecStats:
    steps: int = 0
    drafts: int = 0
    draft_nodes: int = 0
    drafted_depth: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)
    reached_per_position: list[int] = field(default_factory=list)

    def record(self, draft_size: int, depth: int, accepted: int, tested: int | None = None) -> None:
        """One verify step. ``tested``: depths put to the test, the accepted ones plus the next if the last
        accepted node had children (a tree's leaf may end the path early); a chain's is min(depth, accepted + 1)."""
        tested = min(depth, accepted + 1) if tested is None else tested
        self.steps += 1
        self.drafts += draft_size > 0
        self.draft_nodes += draft_size
        self.drafted_depth += depth
        self.accepted_tokens += accepted
        self.accepted_per_position = _combine(self.accepted_per_position, [1] * accepted)
        self.drafted_per_position = _combine(self.drafted_per_position, [1] * depth)
        self.reached_per_position = _combine(self.reached_per_position, [1] * tested)

    def merge(self, other: SpecStats) -> None:
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in _PER_POSITION:
            setattr(self, name, _combine(getattr(self, name), getattr(other, name)))

    def since(self, before: SpecStats) -> SpecStats:
        """What this request's stats counted beyond ``before``, an earlier copy of them (a server's per-step delta)."""
        counts = {name: getattr(self, name) - getattr(before, name) for name in _COUNTS}
        lists = {name: _combine(getattr(self, name), getattr(before, name), -1) for name in _PER_POSITION}
        return SpecStats(**counts, **lists)

    @property
    def conditional_acceptance(self) -> list[float]:
        """Acceptance at depth i+1 given depth i was accepted (depth 1: given it was drafted)."""
        accepted = self.accepted_per_position + [0] * (len(self.reached_per_position) - len(self.accepted_per_position))
        return [a / r if r else 0.0 for a, r in zip(accepted, self.reached_per_position)]

    @property
    def mean_acceptance_length(self) -> float:
        return (self.accepted_tokens + self.steps) / self.steps if self.steps else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.drafted_depth if self.drafted_depth else None

    def as_dict(self) -> dict:
        return {
            "steps": self.steps,
            "drafts": self.drafts,
            "draft_tokens": self.draft_nodes,  # the key results and cards have always used for the nodes
            "drafted_depth": self.drafted_depth,
            "accepted_tokens": self.accepted_tokens,
            "accepted_per_position": self.accepted_per_position,
            "drafted_per_position": self.drafted_per_position,
            "reached_per_position": self.reached_per_position,
            "conditional_acceptance": self.conditional_acceptance,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate": self.acceptance_rate,
        }


def per_depth_summary(record: dict) -> str:
    """'d1 93/100 = 0.93, d2 28/93 = 0.30, …' from an ``as_dict`` record: accepted / tested at each depth."""
    accepted, reached = record.get("accepted_per_position") or [], record.get("reached_per_position") or []
    parts = []
    for depth, tested in enumerate(reached, 1):
        got = accepted[depth - 1] if depth <= len(accepted) else 0
        parts.append(f"d{depth} {got}/{tested} = {got / tested:.2f}" if tested else f"d{depth} 0/0")
    return ", ".join(parts) if parts else "n/a"


_COUNTS = ("steps", "drafts", "draft_nodes", "drafted_depth", "accepted_tokens")
_PER_POSITION = ("accepted_per_position", "drafted_per_position", "reached_per_position")


def _combine(a: list[int], b: list[int], sign: int = 1) -> list[int]:
    """a + sign * b, position by position, the shorter padded with zeros."""
    n = max(len(a), len(b))
    return [x + sign * y for x, y in zip(a + [0] * (n - len(a)), b + [0] * (n - len(b)))]
