"""The decoding engine: requests in batch slots, one step at a time.

Knows: a fixed number of cache slots (the maximum batch); requests join a free
slot at any step (prefill gives their first token: the whole prompt in one step,
or a chunk a step beside the running requests, ``chunked_prefill.py``, and with a
prompt cache only what it does not hold) and leave when they stop,
so a server can drive it with continuous batching through ``add_request`` and
``step``. Running requests are kept in slots ``0..n-1`` (a finished request's
slot is filled by moving the last one down), so a batch reads the cache as a
slice and never gathers it.

Each step is the same for every method: propose (the proposer gives each
running request a draft tree, empty for baseline decoding) → verify (one
target forward over every request's root and draft nodes, a tree mask per
row) → commit (the accepted path's KV is compacted into place, the accepted
tokens and the bonus token are emitted). The engine never branches on the
method's name.

Does not know: tokenizers (it takes and gives token ids), HTTP, or benchmarks.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator

import torch

from speculab.chunked_prefill import ChunkRunner, PrefillJob, Ride, StepShare, target_features
from speculab.free_memory import require
from speculab.logprobs import token_logprobs
from speculab.models.kv_cache import KVCache
from speculab.models.llama import ForwardBatch, ForwardPart, Transformer
from speculab.position_noise import PositionNoise, coupled_tokens
from speculab.prompt_cache import CachedPrompt, PromptCache
from speculab.request import Request, TokenEvent
from speculab.sampling import SamplingParams, random_seed, sample_rows, sampling_probs
from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.tree import VerifyTree, verify_batch
from speculab.speculative.verify import verify_by_rejection, verify_coupled, verify_greedy


def engine_seq_len(model: Transformer, max_seq_len: int | None) -> int:
    """The positions a slot of an engine of ``model`` holds: as asked (4,096 by default), within the model's limits."""
    return min(max_seq_len or 4096, model.config.sliding_window or 1 << 30, model.config.max_position_embeddings)


def engine_bytes(model: Transformer, max_batch: int, max_seq_len: int | None, proposer: Proposer | None = None) -> int:
    """The bytes an engine's caches come to once written: the target's KV and its proposer's state for every slot
    (``free_memory``: what allocates an engine checks them first)."""
    length = engine_seq_len(model, max_seq_len)
    return model.cache_bytes(max_batch, length) + (proposer or Proposer()).state_bytes(max_batch, length)


def sequence_length(prompt_tokens: int, max_tokens: int, proposer: Proposer | None = None) -> int:
    """The KV positions one request needs on an engine: prompt, output and the proposer's ``headroom``; the one
    sum behind every ``max_seq_len`` a caller sizes and every request an engine or a server refuses."""
    return prompt_tokens + max_tokens + (proposer or Proposer()).headroom


class Engine:
    def __init__(
        self,
        model: Transformer,
        max_batch: int = 16,
        max_seq_len: int | None = None,
        stop_ids: frozenset[int] = frozenset(),
        proposer: Proposer | None = None,
        prompt_cache: PromptCache | None = None,
        prefills_per_step: int | None = None,
        chunked_prefill: StepShare | None = None,
        token_logits: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ):
        if not 1 <= max_batch:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.model = model
        self.proposer = proposer or Proposer()
        self.max_batch = max_batch
        self.max_seq_len = engine_seq_len(model, max_seq_len)
        what = f"an engine of {max_batch} slots x {self.max_seq_len} positions ({self.proposer.name})"
        require(engine_bytes(model, max_batch, self.max_seq_len, self.proposer), what, model.norm.weight.device)
        self.cache: KVCache = model.new_cache(max_batch, self.max_seq_len)
        self.proposer.bind(max_batch, self.max_seq_len, model.config)
        self.default_stop_ids = stop_ids or frozenset(model.config.eos_token_ids)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # running[i] lives in slot i
        self._ids = itertools.count()
        self.device = model.norm.weight.device
        self.prompt_cache = prompt_cache
        # None: a step admits every waiting request that fits (a benchmark's batch starts full). A server sets 1, so
        # a running batch and the first arrivals get their tokens after one prefill, not after all of them.
        self.prefills_per_step = prefills_per_step
        # None: a prompt's whole prefill runs in the step that admits it; else how much of a waiting prompt each step
        # runs beside the running requests (chunked_prefill.py: a token budget, or chunks paced to the decode)
        self.chunked_prefill = chunked_prefill
        self.prefilling: PrefillJob | None = None  # the prompt on its way into a slot
        self._chunks = ChunkRunner(model, self.cache, self.proposer, self.proposer.needs_features or prompt_cache is not None)
        # True: each TokenEvent carries the logits its tokens were chosen from (a benchmark's margins, bench/margins.py)
        self.token_logits = token_logits
        # the time its requests' admissions and tokens are stamped with: a benchmark whose engines take turns gives
        # each its own clock, standing still while the others run (bench/turns.py)
        self.clock = clock

    # -- requests -----------------------------------------------------------------
    def check_request(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError if the request cannot run here; reads nothing that a step changes, so a
        server may call it from another thread before handing the request to the engine's."""
        if not prompt_ids:
            raise ValueError("a prompt needs at least one token")
        vocab = self.model.config.vocab_size
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        if sequence_length(len(prompt_ids), params.max_tokens, self.proposer) > self.max_seq_len:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) + draft headroom ({self.proposer.headroom}) "
                f"exceeds the engine's max_seq_len of {self.max_seq_len}"
            )

    def add_request(self, prompt_ids: list[int], params: SamplingParams | None = None) -> Request:
        params = params or SamplingParams()
        self.check_request(prompt_ids, params)
        stop = frozenset() if params.ignore_eos else (params.stop_token_ids if params.stop_token_ids is not None else self.default_stop_ids)
        noise = (
            PositionNoise(params.seed if params.seed is not None else random_seed(), self.model.config.vocab_size)
            if params.coupled
            else None
        )
        generator = None if params.coupled else params.generator()
        request = Request(next(self._ids), list(prompt_ids), params, stop, generator=generator, noise=noise, arrival_time=self.clock())
        self.waiting.append(request)
        return request

    def abort(self, request: Request) -> None:
        """Stop a request now (a client went away, a stop string matched): it leaves the queue, or its slot
        is freed at once for the next waiting request. Finished requests are left as they are."""
        if request.finished:
            return
        request.finish_reason = "abort"
        if request in self.waiting:
            self.waiting.remove(request)
        elif self.prefilling is not None and self.prefilling.request is request:
            self._drop_job()
        elif request.slot is not None:
            self._release_finished()

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.prefilling)

    # -- the loop -------------------------------------------------------------------
    def step(self) -> list[TokenEvent]:
        """Decode one step for the running requests, then admit waiting ones into free slots (their prefill: whole,
        or under a prefill budget the chunks the step has room for, the first in the running requests' forward)."""
        began, pace = time.perf_counter(), self.chunked_prefill  # a paced chunk is sized by the decode's own seconds
        events, ride = self._decode_running() if self.running else ([], None)
        if pace is not None:
            if ride is not None:
                pace.stepped(time.perf_counter() - began, ride)
            events += self._prefill_in_chunks(ride)
        admitted = 0
        while (
            pace is None and self.waiting and len(self.running) < self.max_batch and admitted < (self.prefills_per_step or self.max_batch)
        ):
            events.append(self._prefill(self.waiting.popleft()))
            admitted += 1
        self._release_finished()
        return events

    # -- prefill ----------------------------------------------------------------------
    def _prefill(self, request: Request) -> TokenEvent:
        """The request's whole prompt into the next free slot, now; it joins the running requests with its first token."""
        job = self._start_job(request)
        self.prefilling = job
        try:
            while not job.finished:
                self._chunks.advance(job, len(request.prompt_ids))
        except Exception as err:  # noqa: BLE001  one request's prefill failing must not fail the batch it joins
            self._drop_job()
            return self._fail(request, err)
        self.prefilling = None
        return self._finish_job(job)

    def _prefill_in_chunks(self, ride: Ride | None) -> list[TokenEvent]:
        """Run waiting prompts, the head of the queue first, a chunk at a time, in the room ``chunked_prefill`` gives
        beside this step's ``ride`` (its verify tokens, and the chunk its forward took); each prompt that is whole
        joins the running requests with its first token."""
        events, pace = [], self.chunked_prefill
        used, room = (0, None) if ride is None else (ride.used, None if ride.room is None else ride.room - ride.ran)
        job = self.prefilling
        if job is not None and job.finished:  # its last chunk ran in the step's forward, or the prompt cache held it
            self.prefilling = None
            events.append(self._finish_job(job))
        while room is None or room > 0:
            if self.prefilling is None:
                if not self._can_start_prompt:
                    break
                self.prefilling = self._start_job(self.waiting.popleft())
            job = self.prefilling
            if room is None:
                room = pace.room(used, len(job.request.prompt_ids) - job.done, len(self.running))
                if room < 1:  # a step that measures the decode alone
                    break
            try:
                began, done = time.perf_counter(), job.done
                room -= self._chunks.advance(job, room)
                pace.prefilled(job.done - done, time.perf_counter() - began)  # the target's tokens (a drafter's cost less)
            except Exception as err:  # noqa: BLE001  one prompt failing must not fail the running requests
                self._drop_job()
                events.append(self._fail(job.request, err))
                continue
            if job.finished:
                self.prefilling = None
                events.append(self._finish_job(job))
        return events

    def _ride_along(self, ride: Ride) -> ForwardPart | None:
        """The chunk of the prompt at the head of the queue that the step's forward takes beside its ``ride.used``
        verify tokens (one weight read for both), in the room the step gives prompts; None: no prompt waits, the step
        gives none, or the prompt's drafter must catch up first."""
        job = self.prefilling
        if job is None and not self._can_start_prompt:
            return None
        remaining = len(job.request.prompt_ids) - job.done if job is not None else len(self.waiting[0].prompt_ids)
        ride.room = self.chunked_prefill.room(ride.used, remaining, ride.rows)
        if ride.room < 1:
            return None
        if job is None:
            job = self.prefilling = self._start_job(self.waiting.popleft())
        return self._chunks.part(job, ride.room)

    @property
    def _can_start_prompt(self) -> bool:
        """A prompt waits and a slot is free for it."""
        return bool(self.waiting) and len(self.running) < self.max_batch

    def _start_job(self, request: Request) -> PrefillJob:
        """The request's prompt in the slot after the running requests', with what the prompt cache holds of it."""
        request.admitted_time = self.clock()
        return self._chunks.start(request, len(self.running), self.prompt_cache)

    def _finish_job(self, job: PrefillJob) -> TokenEvent:
        """A whole prompt joins the running requests: in the slot after theirs (moved there if requests left while it
        prefilled), kept in the prompt cache, handed to the proposer, its first token sampled."""
        request, slot = job.request, len(self.running)
        if job.slot != slot:
            self.cache.move(job.slot, slot)
            self.proposer.move(job.slot, slot)
        request.slot = slot
        self.running.append(request)
        try:
            return self._first_token(job)
        except Exception as err:  # noqa: BLE001  one request's prefill failing must not fail the batch it joins
            return self._fail(request, err)

    def _first_token(self, job: PrefillJob) -> TokenEvent:
        request, pc = job.request, self.prompt_cache
        entry = job.hit
        if pc is not None and entry is None:
            pc.misses += 1
            entry = pc.put(job.key, CachedPrompt(self.cache.export(request.slot), job.logits.clone(), job.features))
        if request.noise is not None:
            token = coupled_tokens(sampling_probs(job.logits[None], request.params), request.noise.at([0]))[0]
        else:
            token = sample_rows(job.logits[None], [request.params], [request.generator])[0]
        self._admit(request.slot, request, job.features if self.proposer.needs_features else None, entry)
        return self._emit(request, [token], job.logits[None] if self._keeps_logits(request) else None)

    def _fail(self, request: Request, err: Exception) -> TokenEvent:
        """End one request with finish_reason "error"; its slot is freed with the finished ones."""
        request.finish_reason, request.error = "error", f"{type(err).__name__}: {err}"
        return TokenEvent(request, [], True)

    def _drop_job(self) -> None:
        """The prompt on its way in leaves: its slot's KV and the drafter's share of it are freed."""
        job, self.prefilling = self.prefilling, None
        self._chunks.drop(job)

    def _admit(self, slot: int, request: Request, features: torch.Tensor | None, cached: CachedPrompt | None) -> None:
        """Hand the request to the proposer, from the prompt cache's drafter state when it holds one."""
        key = self.proposer.prompt_cache_key if cached is not None else None
        if key is not None and key in cached.drafter_states:
            self.proposer.admit_cached(slot, request, features, cached.drafter_states[key])
            return
        self.proposer.admit(slot, request, features)
        if key is not None:
            cached.drafter_states[key] = self.proposer.prompt_state(slot)
            self.prompt_cache.evict()  # the entry grew by the drafter's state

    def _decode_running(self) -> tuple[list[TokenEvent], Ride]:
        """One propose → verify → commit step for every running request, a waiting prompt's chunk in the same forward
        under chunked prefill; its events and what its forward held."""
        reqs = self.running
        drafts = self.proposer.propose(ProposeState(reqs))
        trees = [VerifyTree.from_draft(r.output_ids[-1], d) for r, d in zip(reqs, drafts)]
        tokens, batch = self._verify_batch(trees)
        ride = Ride(tokens.numel(), len(reqs))
        chunk = self._ride_along(ride) if self.chunked_prefill is not None else None
        parts = [ForwardPart(tokens, batch)] + ([chunk] if chunk is not None else [])
        outs = self.model.forward_parts(parts, self.cache, capture_layers=self.proposer.feature_layers)
        logits = outs[0].logits  # [batch, q, vocab]
        features = self._features(outs[0]) if self.proposer.needs_features else None
        events = []
        for row, (r, tree) in enumerate(zip(reqs, trees)):
            try:
                events.append(self._commit_row(r, tree, logits[row], None if features is None else features[row]))
            except Exception as err:  # noqa: BLE001  one request's verification failing must not fail the others
                events.append(self._fail(r, err))
        if chunk is not None:
            try:
                ride.ran = self._chunks.ran(self.prefilling, chunk, outs[1])
            except Exception as err:  # noqa: BLE001  one prompt failing must not fail the running requests
                request = self.prefilling.request
                self._drop_job()
                events.append(self._fail(request, err))
        return events, ride

    def _commit_row(
        self,
        r: Request,
        tree: VerifyTree,
        logits: torch.Tensor,  # [q, vocab]: the target's logits at the row's nodes (padding after len(tree))
        features: torch.Tensor | None,  # [q, width] or None
    ) -> TokenEvent:
        """Verify one request's tree, compact its accepted path's KV into place and emit its tokens."""
        n = len(tree)
        if r.params.greedy:
            verdict = verify_greedy(tree, logits[:n])
        elif r.noise is not None:  # the token after node i is at output position len(output_ids) + depth(i)
            positions = (len(r.output_ids) + tree.depth).tolist()
            verdict = verify_coupled(tree, sampling_probs(logits[:n], r.params), r.noise.at(positions))
            r.noise.forget_before(len(r.output_ids))
        else:
            verdict = verify_by_rejection(tree, sampling_probs(logits[:n], r.params), r.generator)
        start = self.cache.lengths[r.slot]
        self.cache.compact(r.slot, torch.tensor(verdict.accepted, device=self.device) + start, start)
        last_has_children = bool(tree.children()[verdict.accepted[-1]])
        r.stats.record(n - 1, tree.max_depth, verdict.num_accepted, verdict.num_accepted + last_has_children)
        if features is not None:
            self.proposer.observe(r.slot, features[verdict.accepted])
        accepted = tree.tokens[verdict.accepted[1:]].tolist()
        chosen_from = logits[verdict.accepted] if self._keeps_logits(r) else None  # row of node i: token i+1
        return self._emit(r, accepted + [verdict.next_token], chosen_from)

    def _features(self, out) -> torch.Tensor:
        """[batch, q, width]: the final hidden states, or the proposer's chosen layers' inputs side by side."""
        return target_features(out, self.proposer.feature_layers)

    def _verify_batch(self, trees: list[VerifyTree]) -> tuple[torch.Tensor, ForwardBatch]:
        """Tokens [batch, q] and the forward batch verifying every running request's tree after its context."""
        return verify_batch(trees, [self.cache.lengths[r.slot] for r in self.running], self.device)

    def _emit(
        self,
        request: Request,
        tokens: list[int],
        chosen_from: torch.Tensor | None = None,  # [len(tokens), vocab] the logits each token was chosen from
    ) -> TokenEvent:
        """Append tokens up to the first stop token or its max_tokens, and mark the request finished."""
        kept: list[int] = []
        now = self.clock()
        for token in tokens:
            if token in request.stop_ids:
                request.finish_reason = "stop"
                break
            kept.append(token)
            request.output_ids.append(token)
            request.token_times.append(now)
            if len(request.output_ids) >= request.params.max_tokens:
                request.finish_reason = "length"
                break
        chosen_from = None if chosen_from is None else chosen_from[: len(kept)]
        logprobs = None
        if request.params.logprobs is not None:
            logprobs = token_logprobs(chosen_from, kept, request.params.logprobs) if kept else []
            request.logprobs += logprobs
        return TokenEvent(request, kept, request.finished, chosen_from if self.token_logits else None, logprobs)

    def _keeps_logits(self, request: Request) -> bool:
        """A step keeps the logits its tokens were chosen from: for a benchmark's margins, or the request's logprobs."""
        return self.token_logits or request.params.logprobs is not None

    def _release_finished(self) -> None:
        """Free finished slots, moving the last running request into each hole."""
        slot = 0
        while slot < len(self.running):
            if not self.running[slot].finished:
                slot += 1
                continue
            self.running[slot].slot = None
            self.proposer.release(slot)
            last = self.running.pop()
            if slot == len(self.running):  # the finished request was the last one
                self.cache.free(slot)
                continue
            self.cache.move(last.slot, slot)
            self.proposer.move(last.slot, slot)
            last.slot = slot
            self.running[slot] = last

    # -- conveniences ------------------------------------------------------------
    def stream(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams] | None = None) -> Iterator[TokenEvent]:
        """Run prompts to completion, yielding tokens as they are produced."""
        params_list = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params_list)} sampling parameter sets")
        mine = {self.add_request(prompt, p).id for prompt, p in zip(prompts, params_list)}
        while self.has_work and mine:
            for event in self.step():
                if event.request.id in mine:
                    yield event
                    if event.finished:
                        mine.discard(event.request.id)

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
        on_token: Callable[[TokenEvent], None] | None = None,
    ) -> list[Request]:
        """Run prompts to completion; returns the requests in prompt order."""
        done: dict[int, Request] = {}
        for event in self.stream(prompts, params):
            if on_token is not None:
                on_token(event)
            if event.finished:
                done[event.request.id] = event.request
        return [done[i] for i in sorted(done)]
