"""Chunked prefill: a prompt run into its slot a chunk at a time, in the steps of the requests already running.

A long prompt so spreads over several steps while every running stream keeps emitting, and the drafter's own prompt
state follows the same chunks (``Proposer.prefill_chunk``: an EAGLE head's KV from each chunk's features, a draft
model's KV), so no step runs a whole prompt through the drafter either. A step's chunk runs in the running requests'
own forward (``Transformer.forward_parts``: on the C++ loop their rows share each matmul), so it costs its tokens'
arithmetic and not another read of every weight, which a small chunk in a forward of its own mostly is on a CPU. How
much of a prompt a step runs is the engine's ``chunked_prefill``:
- ``TokenBudget(n)``: vLLM's ``max_num_batched_tokens``. The running requests' verify tokens (root and draft nodes, as
  the step's forward holds them) count first, and the prompt at the head of the queue takes the rest, never less than
  a quarter of the budget, so that a prompt always advances however many streams run.
- ``PacedChunks()``: each chunk sized to add about ``share`` of a decode step to its step, both measured as the engine
  runs (an average of the last chunk-free steps' seconds, and of what the last chunks added per prompt token): by construction the streams'
  gaps stay within about ``1 + share`` of their own whatever the CPU and the context length, where a fixed budget
  right for one CPU stalls the streams on a slower one or delays first tokens on a faster one. With no stream running,
  the whole rest of the prompt runs at once.

Knows: one prompt's progress (the target's positions in its slot, the drafter's, the features so far), what a prompt
cache gives a new one (the whole prompt, or a shared head with its drafter's share), and how much of a step's room the
next chunk takes. Does not know: sampling, slots' order, when a prompt is kept in the prompt cache or requests' events
(``engine.py`` finishes a job), or how a forward runs (``models/llama.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from speculab.models.kv_cache import KVCache
from speculab.models.llama import ForwardOutput, ForwardPart, Transformer, prefill, prompt_part
from speculab.prompt_cache import CachedPrompt, PromptCache
from speculab.request import Request
from speculab.speculative.proposer import Proposer

PREFILL_CHUNK = 512  # tokens per prefill forward: bounds the activations of long prompts
# a paced chunk's cost in decode steps: the streams' gaps at about 1.6x their own, under the 2x a user can bear with
# room for the jitter a server adds (at 0.75 their p99 over HTTP read 1.72-2.10x on an EPYC Zen 1: BENCHMARKS
# "Chunked prefill beside running streams")
SHARE = 0.6


def prefill_room(budget: int, used: int) -> int:
    """The tokens a step's prefill may run: what the running requests' ``used`` verify tokens leave of ``budget``, and
    never less than a quarter of it."""
    return max(budget - used, budget // 4, 1)


# a paced step measures the running requests' decode alone (no chunk beside it) when the number of running requests has
# none yet, or its last is this many steps old: the decode a chunk is sized against stays the streams' own
REFRESH_STEPS = 32


@dataclass
class Ride:
    """A step's forward beside its running requests: ``used``, their verify tokens; ``rows``, how many run; ``room``,
    the prompt tokens the step gives prompts (None: no prompt waited when the step was planned); ``ran``, the prompt
    tokens of a chunk that rode in the same forward."""

    used: int
    rows: int
    room: int | None = None
    ran: int = 0


class StepShare:
    """How much of a waiting prompt a step runs beside the running requests: the engine asks ``room`` once a step, and
    tells it what the step's forward and separate chunks took."""

    def room(self, used: int, remaining: int, rows: int) -> int:
        """The prompt tokens this step may run: ``used``, the running requests' verify tokens; ``remaining``, the
        waiting prompt's tokens not yet run; ``rows``, how many requests run (0: none)."""
        raise NotImplementedError

    def stepped(self, seconds: float, ride: Ride) -> None:
        """A step of the running requests took ``seconds``, ``ride.ran`` prompt tokens riding in its forward."""

    def prefilled(self, tokens: int, seconds: float) -> None:
        """A chunk of ``tokens`` prompt tokens took ``seconds`` in a forward of its own."""


class TokenBudget(StepShare):
    """A fixed number of tokens a step (``prefill_room``)."""

    def __init__(self, tokens: int):
        if tokens < 1:
            raise ValueError(f"a step's token budget must be at least 1 token, got {tokens}")
        self.tokens = tokens

    def room(self, used: int, remaining: int, rows: int) -> int:
        return prefill_room(self.tokens, used)

    def __repr__(self) -> str:
        return f"TokenBudget({self.tokens})"


class PacedChunks(StepShare):
    """Chunks that add about ``share`` of a decode step to the step they ride in, both averaged over the last steps
    (weight ``1 - keep`` on the newest); ``first`` tokens before anything is measured.

    The decode's seconds are those of steps with no chunk, kept for each number of running requests; a step gives
    prompts no room (room 0) where that number has none, or its last is ``REFRESH_STEPS`` steps old. A prompt token's
    seconds are what riding chunks added to their steps over that decode, per token: the chunk's arithmetic and its
    attention's read of the prompt's keys and values so far, which a whole prefill spreads over 512 tokens and a small
    chunk pays each step. Until a chunk has ridden, a prompt run alone (with no stream running) prices a token.
    """

    def __init__(self, share: float = SHARE, first: int = 8, keep: float = 0.8):
        self.share, self.first, self.keep = share, first, keep
        self.decode_s: dict[int, float] = {}  # a decode step's seconds, averaged, by the number of running requests
        self.age: dict[int, int] = {}  # steps since that number's decode was last measured
        self.token_s: float | None = None  # what a prompt token adds to a step's seconds, averaged
        self.ridden = False  # token_s comes from riding chunks (not from prompts run alone)

    def room(self, used: int, remaining: int, rows: int) -> int:
        if not rows:
            return remaining
        if rows not in self.decode_s or self.age[rows] >= REFRESH_STEPS:
            return 0
        if self.token_s is None:
            return self.first
        return max(1, int(self.share * self.decode_s[rows] / self.token_s))

    def stepped(self, seconds: float, ride: Ride) -> None:
        self.age[ride.rows] = self.age.get(ride.rows, 0) + 1
        if ride.ran and ride.rows in self.decode_s:
            self._token(ride.ran, seconds - self.decode_s[ride.rows])
            self.ridden = True
        elif not ride.ran and not ride.room:  # the decode alone (a prompt started or caught up: neither)
            old = self.decode_s.get(ride.rows)
            self.decode_s[ride.rows] = seconds if old is None else self.keep * old + (1 - self.keep) * seconds
            self.age[ride.rows] = 0

    def prefilled(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and not self.ridden:
            self._token(tokens, seconds)

    def _token(self, tokens: int, seconds: float) -> None:
        per = max(seconds / tokens, 1e-6)  # a step timed faster than its own decode teaches a tiny cost, never none
        self.token_s = per if self.token_s is None else self.keep * self.token_s + (1 - self.keep) * per

    def __repr__(self) -> str:
        return f"PacedChunks(share={self.share})"


@dataclass
class PrefillJob:
    """A prompt on its way into ``slot``: the target's positions run so far, the drafter's, and what they gave."""

    request: Request
    slot: int
    done: int = 0  # leading prompt positions whose KV the slot holds
    fed: int = 0  # leading prompt positions handed to the drafter (Proposer.prefill_chunk)
    features: Tensor | None = None  # [done, width]: the target's features there, where they are kept
    logits: Tensor | None = None  # [vocab] at the prompt's last position, once done reaches it
    key: tuple | None = None  # its prompt cache key, where there is a prompt cache
    hit: CachedPrompt | None = None  # the whole prompt, found in the prompt cache

    @property
    def finished(self) -> bool:
        n = len(self.request.prompt_ids)
        return self.done == n and self.fed == n


@dataclass(frozen=True)
class ChunkRunner:
    """Runs a job's chunks: the target's forward into the slot, then the drafter's share of the same positions."""

    model: Transformer
    cache: KVCache
    proposer: Proposer
    keep_features: bool  # the proposer reads them, or a prompt cache keeps them

    def start(self, request: Request, slot: int, prompt_cache: PromptCache | None) -> PrefillJob:
        """``request``'s prompt in ``slot``, with whatever of it ``prompt_cache`` holds: the whole prompt (its KV, logits
        and features), or the longest head another cached prompt shares (its KV and features, and the drafter's share
        of that head where the cached prompt kept its drafter's state; else the drafter is handed those positions
        first, as the target's next chunks are run)."""
        job, ids, pc = PrefillJob(request, slot), request.prompt_ids, prompt_cache
        if pc is None:
            return job
        job.key = pc.key(ids, self.proposer.feature_layers)
        job.hit = pc.get(job.key)
        if job.hit is not None:
            pc.hits += 1
            self.cache.load(slot, job.hit.kv)
            job.done = job.fed = request.cached_tokens = len(ids)
            job.logits, job.features = job.hit.logits, job.hit.features
            return job
        head, shared = pc.longest_head(job.key)
        if head is not None:
            self.cache.load(slot, head.kv[:, :, :shared])
            pc.prefix_hits, pc.reused_tokens = pc.prefix_hits + 1, pc.reused_tokens + shared
            job.done, job.features, request.cached_tokens = shared, head.features[:shared], shared
            state = head.drafter_states.get(self.proposer.prompt_cache_key)
            job.fed = self.proposer.admit_head(slot, state, shared) if state is not None else 0
        return job

    def drop(self, job: PrefillJob) -> None:
        """The job's slot freed: the target's KV and the drafter's share of it."""
        self.cache.free(job.slot)
        self.proposer.release(job.slot)

    def advance(self, job: PrefillJob, room: int) -> int:
        """Run up to ``room`` tokens of ``job``; the tokens it ran. A drafter behind the target (a prompt that took a
        cached head's KV) catches up first, a chunk at a time as the target's own positions are run."""
        if job.fed < job.done:
            begin = job.fed
            self._feed(job, min(begin + room, job.done))
            return job.fed - begin
        begin, n = job.done, len(job.request.prompt_ids)
        if begin < n:
            self._run_target(job, min(begin + room, n))
            self._feed(job, job.done)
        return job.done - begin

    def part(self, job: PrefillJob, room: int) -> ForwardPart | None:
        """The target's next chunk of ``job``, up to ``room`` tokens, as a part of the running requests' forward (one
        weight read for both); None where the drafter must catch up first or nothing is left to run."""
        n, dev = len(job.request.prompt_ids), self.model.norm.weight.device
        if job.fed < job.done or job.done >= n or room < 1:
            return None
        return prompt_part(job.slot, job.request.prompt_ids, job.done, min(job.done + room, job.done + PREFILL_CHUNK, n), dev)

    def ran(self, job: PrefillJob, part: ForwardPart, out: ForwardOutput) -> int:
        """``part`` of ``job`` ran as ``out`` in the running requests' forward: commit it and hand the drafter the same
        positions; the tokens it ran."""
        end = job.done + part.tokens.shape[1]
        self.cache.commit(job.slot, end)
        self._took(job, [out], end)
        self._feed(job, end)
        return part.tokens.shape[1]

    def _run_target(self, job: PrefillJob, end: int) -> None:
        """The target's forward over prompt positions [done, end) into the job's slot."""
        layers = self.proposer.feature_layers
        self._took(job, prefill(self.model, self.cache, job.slot, job.request.prompt_ids[:end], layers, PREFILL_CHUNK, start=job.done), end)

    def _took(self, job: PrefillJob, outputs: list[ForwardOutput], end: int) -> None:
        """The target ran positions [done, end) as ``outputs``, chunk after chunk: keep their features and the logits."""
        if self.keep_features:
            found = [target_features(o, self.proposer.feature_layers)[0] for o in outputs]
            job.features = torch.cat(found if job.features is None else [job.features, *found])
        job.done, job.logits = end, outputs[-1].logits[0, -1]

    def _feed(self, job: PrefillJob, end: int) -> None:
        """Hand the drafter prompt positions [fed, end) (their features where it reads them)."""
        features = job.features[job.fed : end] if self.proposer.needs_features else None
        self.proposer.prefill_chunk(job.slot, job.request.prompt_ids, job.fed, end, features)
        job.fed = end


def target_features(out, layers: tuple[int, ...]) -> Tensor:
    """[batch, q, width]: the final hidden states, or the inputs of ``layers`` side by side (what a proposer reads)."""
    return torch.cat([out.captured[i] for i in layers], dim=-1) if layers else out.hidden
