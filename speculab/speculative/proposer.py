"""The proposer interface (the table of proposers by method name is ``registry.py``).

A proposer turns the running requests into one :class:`Draft` each
(``propose``). Proposers with state of their own (a draft model's KV cache)
follow the engine's slots through ``admit`` / ``move`` / ``release``. What
``admit`` builds from a prompt alone can be cached with the target's prompt
(``prompt_cache_key``, ``prompt_state``, ``admit_cached``), so that a cached
prompt skips the drafter's prefill as it skips the target's. The
engine knows proposers only through this interface and the registry, never by
method name. A proposer's settings have no defaults of their own (keyword-only,
required): ``methods.METHODS`` is their one home; the only defaulted options are
features that are off unless asked for (None: no batch budget, the whole vocabulary).

Does not know: verification (``verify.py``) or the target's cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from speculab.speculative.tree import Draft

if TYPE_CHECKING:
    from torch import Tensor

    from speculab.models.config import ModelConfig
    from speculab.request import Request


@dataclass(frozen=True)
class ProposeState:
    """What a proposer may read: the running requests, row i in slot i."""

    requests: list[Request]
    # row i's most draft nodes this step (None: no cap), set by a policy (speculative/policy.py), which then keeps only
    # that many of the draft; a proposer may use it to draft less, and must draft parents before their children
    max_draft_nodes: list[int | None] | None = None

    def most_draft_nodes(self, own: int) -> int:
        """The most nodes any row may have this step: ``own`` (the proposer's most) unless every row is capped lower."""
        caps = self.max_draft_nodes
        if caps is None or any(c is None for c in caps):
            return own
        return min(own, max(caps, default=own))


class Proposer:
    """Base proposer: proposes nothing, which is plain (baseline) decoding."""

    name = "baseline"
    max_draft_tokens = 0  # the most draft nodes a single propose() returns per request
    needs_features = False  # True when it reads the target's hidden states (EAGLE)
    feature_layers: tuple[int, ...] = ()  # target layers whose inputs form the features; () = the final hidden state
    learns_across_requests = False  # drafts from other requests' outputs too (suffix decoding's shared tree)
    prefix_chains = False  # drafts chains, and a draft capped at c nodes is the first c of the uncapped one (tune uses it)

    @property
    def headroom(self) -> int:
        """KV positions a request needs beyond its prompt and output: a verify step writes the last accepted token
        and every draft node past the committed ones (engine.sequence_length adds it up)."""
        return self.max_draft_tokens + 1

    def bind(self, num_slots: int, max_seq_len: int, target: ModelConfig) -> None:
        """Called once by the engine: its slot count, sequence limit and the target's config."""

    def propose(self, state: ProposeState) -> list[Draft]:
        return [Draft.empty() for _ in state.requests]

    def admit(self, slot: int, request: Request, features: Tensor | None = None) -> None:
        """A request entered ``slot``; features: [prompt_len, hidden] the target's prefill hidden states."""

    @property
    def prompt_cache_key(self) -> object | None:
        """Names the drafter whose ``prompt_state`` may be cached with a prompt; None: nothing to cache."""
        return None

    def prompt_state(self, slot: int) -> Any:
        """What ``admit`` built from the prompt alone in ``slot``, for ``admit_cached``."""
        raise NotImplementedError

    def admit_cached(self, slot: int, request: Request, features: Tensor | None, state: Any) -> None:
        """``admit`` from a cached ``prompt_state`` of the same prompt and drafter."""
        raise NotImplementedError

    def observe(self, slot: int, features: Tensor) -> None:
        """features: [accepted + 1, hidden] the target's hidden states at the kept path (root first)."""

    def move(self, src: int, dst: int) -> None:
        """The request in ``src`` now lives in ``dst``."""

    def release(self, slot: int) -> None:
        """The request in ``slot`` left."""
