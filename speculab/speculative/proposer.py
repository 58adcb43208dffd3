"""The proposer interface, and the base of proposers that wrap another (the table of methods, each naming its
proposer class, is ``methods.METHODS``).

A proposer turns the running requests into one :class:`Draft` each
(``propose``). Proposers with state of their own (a draft model's KV cache)
follow the engine's slots through ``admit`` / ``move`` / ``release``. What
``admit`` builds from a prompt alone can be cached with the target's prompt
(``prompt_cache_key``, ``prompt_state``, ``admit_cached``), so that a cached
prompt skips the drafter's prefill as it skips the target's. The engine knows
proposers only through this interface, never by method name. A proposer's
settings have no defaults of their own (keyword-only, required):
``methods.METHODS`` is their one home; the only defaulted option is a feature
that is off unless asked for (None: the whole vocabulary).

Does not know: verification (``verify.py``) or the target's cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from speculab.speculative.tree import Draft

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from speculab.models.config import ModelConfig
    from speculab.position_noise import PositionNoise
    from speculab.sampling import SamplingParams
    from speculab.speculative.stats import SpecStats


class RunningRequest(Protocol):
    """What a proposer reads of a running request: the engine's ``speculab.request.Request``, which sits above
    this package (it keeps a ``SpecStats``), so proposers name it by these fields alone."""

    prompt_ids: list[int]
    output_ids: list[int]
    slot: int | None
    params: SamplingParams
    generator: torch.Generator | None
    noise: PositionNoise | None  # sampled under coupled verification: its position-keyed noise (position_noise.py)
    stats: SpecStats


@dataclass(frozen=True)
class ProposeState:
    """What a proposer may read: the running requests, row i in slot i."""

    requests: list[RunningRequest]
    # row i's draft budget this step, the most draft nodes it may keep (None: none), set by a speculation policy
    # (policy_proposer.py), which then keeps only that many of the draft; a proposer may use it to draft less, and must
    # draft parents before their children
    draft_budgets: list[int | None] | None = None

    def largest_budget(self) -> int | None:
        """The largest draft budget of any row this step; None: some row has none."""
        budgets = self.draft_budgets
        if budgets is None or any(b is None for b in budgets):
            return None
        return max(budgets, default=None)


class Proposer:
    """Base proposer: proposes nothing, which is plain (baseline) decoding."""

    name = "baseline"
    max_draft_tokens = 0  # the most draft nodes a single propose() returns per request
    needs_features = False  # True when it reads the target's hidden states (EAGLE)
    feature_layers: tuple[int, ...] = ()  # target layers whose inputs form the features; () = the final hidden state
    learns_across_requests = False  # drafts from other requests' outputs too (suffix decoding's shared tree)
    prefix_chains = False  # drafts chains, and a draft under a budget of c nodes is the first c of the whole one (tune uses it)

    @property
    def headroom(self) -> int:
        """KV positions a request needs beyond its prompt and output: a verify step writes the last accepted token
        and every draft node past the committed ones (engine.sequence_length adds it up)."""
        return self.max_draft_tokens + 1

    def bind(self, num_slots: int, max_seq_len: int, target: ModelConfig) -> None:
        """Called once by the engine: its slot count, sequence limit and the target's config."""

    def state_bytes(self, num_slots: int, max_seq_len: int) -> int:
        """The bytes ``bind`` allocates for these slots and sequence limit, once written (a drafter's KV cache)."""
        return 0

    def propose(self, state: ProposeState) -> list[Draft]:
        return [Draft.empty() for _ in state.requests]

    def prefill_chunk(self, slot: int, prompt_ids: list[int], begin: int, end: int, features: Tensor | None = None) -> None:
        """The target ran prompt positions [begin, end) into ``slot`` (features: [end - begin, width] there, where
        ``needs_features``): a proposer with a prompt state of its own may build it a chunk at a time here, so that a
        long prompt's drafter prefill spreads over the steps the target's does. Chunks come in order from 0; ``admit``
        then completes what they left (a slot holds nothing of a drafter's between requests)."""

    def admit(self, slot: int, request: RunningRequest, features: Tensor | None = None) -> None:
        """A request entered ``slot``; features: [prompt_len, hidden] the target's prefill hidden states."""

    @property
    def prompt_cache_key(self) -> object | None:
        """Names the drafter whose ``prompt_state`` may be cached with a prompt; None: nothing to cache."""
        return None

    def prompt_state(self, slot: int) -> Any:
        """What ``admit`` built from the prompt alone in ``slot``, for ``admit_cached``."""
        raise NotImplementedError

    def admit_cached(self, slot: int, request: RunningRequest, features: Tensor | None, state: Any) -> None:
        """``admit`` from a cached ``prompt_state`` of the same prompt and drafter."""
        raise NotImplementedError

    def admit_head(self, slot: int, state: Any, shared: int) -> int:
        """``slot`` takes what a cached ``prompt_state`` of another prompt holds of their first ``shared`` (common)
        positions; the prompt positions it then holds, from which ``prefill_chunk`` goes on (0: none, it starts over)."""
        return 0

    def observe(self, slot: int, features: Tensor) -> None:
        """features: [accepted + 1, hidden] the target's hidden states at the kept path (root first)."""

    def move(self, src: int, dst: int) -> None:
        """The request in ``src`` now lives in ``dst``."""

    def release(self, slot: int) -> None:
        """The request in ``slot`` left."""


class WrappedProposer(Proposer):
    """A proposer that is another one's in every part of the interface: the base of proposers that only decide
    how much of the inner one's drafts a step uses (``policy_proposer.PolicyProposer``)."""

    def __init__(self, inner: Proposer):
        self.inner = inner
        self.name = inner.name
        self.max_draft_tokens = inner.max_draft_tokens
        self.needs_features = inner.needs_features
        self.feature_layers = inner.feature_layers
        self.prefix_chains = inner.prefix_chains
        self.learns_across_requests = inner.learns_across_requests

    def propose(self, state: ProposeState) -> list[Draft]:
        return self.inner.propose(state)

    @property
    def headroom(self) -> int:
        return self.inner.headroom

    def bind(self, num_slots: int, max_seq_len: int, target: ModelConfig) -> None:
        self.inner.bind(num_slots, max_seq_len, target)

    def state_bytes(self, num_slots: int, max_seq_len: int) -> int:
        return self.inner.state_bytes(num_slots, max_seq_len)

    def prefill_chunk(self, slot: int, prompt_ids: list[int], begin: int, end: int, features: Tensor | None = None) -> None:
        self.inner.prefill_chunk(slot, prompt_ids, begin, end, features)

    def admit(self, slot: int, request: RunningRequest, features: Tensor | None = None) -> None:
        self.inner.admit(slot, request, features)

    @property
    def prompt_cache_key(self) -> object | None:
        return self.inner.prompt_cache_key

    def prompt_state(self, slot: int) -> Any:
        return self.inner.prompt_state(slot)

    def admit_cached(self, slot: int, request: RunningRequest, features: Tensor | None, state: Any) -> None:
        self.inner.admit_cached(slot, request, features, state)

    def admit_head(self, slot: int, state: Any, shared: int) -> int:
        return self.inner.admit_head(slot, state, shared)

    def observe(self, slot: int, features: Tensor) -> None:
        self.inner.observe(slot, features)

    def move(self, src: int, dst: int) -> None:
        self.inner.move(src, dst)

    def release(self, slot: int) -> None:
        self.inner.release(slot)
