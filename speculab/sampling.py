"""Sampling parameters and the distribution they make of a model's logits.

Knows: greedy (temperature 0), temperature, top-k, top-p, per-request seeds.
``sampling_probs`` is the one definition of that distribution: of the target's
logits, what plain sampling and lossless speculative verification draw from; of
a draft model's, what its sampled drafts are drawn from. So they cannot drift
apart. Does not know: drafts or acceptance (``speculative/verify.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # the seeds torch.Generator.manual_seed takes
MAX_TOP_LOGPROBS = 20  # top tokens a request's logprobs may list, as vLLM's and OpenAI's APIs allow
# how a sampled request's tokens are drawn and its drafts verified: "coupled" from position-keyed noise
# (position_noise.py: the same seed gives the same output under any drafter, batch or policy), "rejection" from
# one generator stream (rejection sampling: a sampled draft accepted more often); "auto": coupled when seeded
SAMPLING_VERIFY = ("auto", "coupled", "rejection")


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k
    seed: int | None = None
    stop_token_ids: frozenset[int] | None = None  # None = the model's stop tokens
    ignore_eos: bool = False
    sampling_verify: str = "auto"  # one of SAMPLING_VERIFY: how a sampled request's drafts are verified
    logprobs: int | None = None  # report each token's logprob and this many top tokens' (logprobs.py); None: none

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:  # also false for NaN
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            raise ValueError(f"seed must be in [{SEED_MIN}, {SEED_MAX}] (what torch.Generator takes), got {self.seed}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {self.logprobs}")
        if self.sampling_verify not in SAMPLING_VERIFY:
            raise ValueError(f"sampling_verify must be one of {', '.join(SAMPLING_VERIFY)}, got {self.sampling_verify!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def coupled(self) -> bool:
        """Sampled, its tokens drawn from position-keyed noise (``position_noise.py``)."""
        how = self.sampling_verify
        return not self.greedy and (how == "coupled" or (how == "auto" and self.seed is not None))

    def generator(self) -> torch.Generator | None:
        if self.greedy:
            return None
        g = torch.Generator()
        g.manual_seed(self.seed if self.seed is not None else random_seed())
        return g


def random_seed() -> int:
    """A seed for a sampled request that named none, from torch's global generator (a test seeds it)."""
    return int(torch.randint(0, 2**62, ()).item())


def add_sampling_verify_flag(parser, default: str | None = "auto") -> None:
    """``--sampling-verify``, as serve, generate and bench declare it (bench: None, a resumed run's own)."""
    parser.add_argument(
        "--sampling-verify",
        choices=SAMPLING_VERIFY,
        default=default,
        help="sampled requests: coupled (a seed gives the same text under any drafter, batch or policy), rejection "
        "(rejection sampling: a sampled draft is accepted more often), or auto (the default: coupled when seeded)",
    )


def greedy_tokens(logits: Tensor) -> list[int]:
    """Each row's argmax: the first index on ties, a NaN counting as the largest, as ``torch.argmax``.

    logits: [..., vocab]; returns the ids as nested lists shaped like ``logits.shape[:-1]``.
    Why numpy on a CPU: torch's CPU argmax is not vectorised (66 us for one 49,152-token row, 140 us for a
    4-token verify's rows on a 2-core AMX Xeon, ``benchmarks/kernels_alone.py argmax``); numpy's takes 3 and 11 us.
    """
    if logits.device.type != "cpu":
        return logits.argmax(-1).tolist()
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()  # numpy has no bfloat16
    return logits.detach().numpy().argmax(-1).tolist()


def sampling_probs(logits: Tensor, params: SamplingParams) -> Tensor:
    """The distribution a request's settings make of logits (the target's or a drafter's): softmax(logits / T)
    restricted by top-k and top-p.

    logits: [n, vocab] (any float dtype); returns fp32 probabilities [n, vocab].
    Greedy params give a one-hot distribution on the argmax.
    """
    logits = logits.float()
    if params.greedy:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    if params.top_k and params.top_k < logits.shape[-1]:  # before scaling: a huge temperature would tie them all
        kth = logits.topk(params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    fp32 = torch.finfo(torch.float32)
    if not fp32.tiny <= params.temperature <= fp32.max:  # a temperature fp32 cannot hold: scale in fp64
        logits = logits.double()
    # Shifted so the top logit is 0 before scaling: at any positive temperature, however small, the scaled
    # logits stay <= 0 (no inf - inf, no 0/0), and the top token keeps its probability.
    logits = (logits - logits.amax(-1, keepdim=True)) / params.temperature
    probs = logits.softmax(-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = sorted_probs.cumsum(-1) - sorted_probs >= params.top_p
        drop[..., 0] = False  # a top_p below fp32's smallest number compares as 0
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs.float()


def sample_rows(
    logits: Tensor,  # [batch, vocab]
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[int]:
    """One token per row, each row with its own parameters and generator."""
    tokens = greedy_tokens(logits)
    for row, p in enumerate(params):
        if not p.greedy:
            probs = sampling_probs(logits[row : row + 1], p)
            tokens[row] = int(torch.multinomial(probs, 1, generator=generators[row]).item())
    return tokens
