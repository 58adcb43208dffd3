"""One request's state as the engine keeps it, and the tokens one step gives it.

Knows: what a request asked for (prompt, sampling parameters, stop ids), what it produced so far (tokens, their
times, its speculation counters) and how it ended; the logits a step chose its tokens from, and the tokens' logprobs,
when asked.
Does not know: slots' caches or steps (``engine.py`` moves a request through them), proposers, or HTTP.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from speculab.logprobs import TokenLogprob
from speculab.position_noise import PositionNoise
from speculab.sampling import SamplingParams
from speculab.speculative.stats import SpecStats


@dataclass
class Request:
    id: int
    prompt_ids: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    output_ids: list[int] = field(default_factory=list)
    slot: int | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error" (see ``error``)
    error: str | None = None  # why this request alone failed (finish_reason "error"); co-batched requests go on
    generator: torch.Generator | None = None
    noise: PositionNoise | None = None  # coupled sampling's position-keyed noise; its seed is the request's in force
    arrival_time: float = field(default_factory=time.perf_counter)
    admitted_time: float | None = None  # when it entered a slot (its prefill began)
    cached_tokens: int = 0  # leading prompt tokens a prompt cache held: their prefill was not run
    token_times: list[float] = field(default_factory=list)  # when each output token was produced
    logprobs: list[TokenLogprob] = field(default_factory=list)  # each output token's, where asked (params.logprobs)
    stats: SpecStats = field(default_factory=SpecStats)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.arrival_time if self.token_times else None


@dataclass(frozen=True)
class TokenEvent:
    """New tokens of one request, produced by one step."""

    request: Request
    token_ids: list[int]
    finished: bool
    logits: torch.Tensor | None = None  # [len(token_ids), vocab]: the rows each token was chosen from (Engine token_logits)
    logprobs: list[TokenLogprob] | None = None  # one a token, where the request asked (SamplingParams.logprobs)
