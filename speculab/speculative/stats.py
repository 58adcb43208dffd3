"""Speculation statistics, per request and in aggregate, in vLLM's terms.

- ``steps``: verify steps (target forwards after prefill).
- ``drafts``: steps whose draft was not empty.
- ``draft_tokens``: draft nodes proposed (a tree counts all its nodes).
- ``drafted_depth``: draft tokens along the verified depth, summed over steps
  (a chain of k counts k; a tree counts its depth): the most that could be accepted.
- ``accepted_tokens``: draft tokens accepted.
- ``accepted_per_position[i]``: steps that accepted a token at depth i+1.
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
    draft_tokens: int = 0
    drafted_depth: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def record(self, draft_size: int, depth: int, accepted: int) -> None:
        self.steps += 1
        self.drafts += draft_size > 0
        self.draft_tokens += draft_size
        self.drafted_depth += depth
        self.accepted_tokens += accepted
        if len(self.accepted_per_position) < accepted:
            self.accepted_per_position += [0] * (accepted - len(self.accepted_per_position))
        for i in range(accepted):
            self.accepted_per_position[i] += 1

    def merge(self, other: SpecStats) -> None:
        self.steps += other.steps
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.drafted_depth += other.drafted_depth
        self.accepted_tokens += other.accepted_tokens
        n = max(len(self.accepted_per_position), len(other.accepted_per_position))
        a = self.accepted_per_position + [0] * (n - len(self.accepted_per_position))
        b = other.accepted_per_position + [0] * (n - len(other.accepted_per_position))
        self.accepted_per_position = [x + y for x, y in zip(a, b)]

    def since(self, before: SpecStats) -> SpecStats:
        """What this request's stats counted beyond ``before``, an earlier copy of them (a server's per-step delta)."""
        n = len(self.accepted_per_position)
        earlier = before.accepted_per_position + [0] * (n - len(before.accepted_per_position))
        return SpecStats(
            self.steps - before.steps,
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.drafted_depth - before.drafted_depth,
            self.accepted_tokens - before.accepted_tokens,
            [a - b for a, b in zip(self.accepted_per_position, earlier)],
        )

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
            "draft_tokens": self.draft_tokens,
            "drafted_depth": self.drafted_depth,
            "accepted_tokens": self.accepted_tokens,
            "accepted_per_position": self.accepted_per_position,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate": self.acceptance_rate,
        }
