"""Draft-model proposer: a standalone small Llama-family model that shares the target's vocabulary.

Knows: its own model and its own KV cache (one slot per engine slot), the
tokens each slot's cache holds, and how to catch up after a verify step: it
rolls its cache back to the longest prefix still true of the request's
sequence and feeds the rest (the accepted tokens and the bonus token) in one
batched forward before drafting ``num_speculative_tokens`` tokens as a chain.
Greedy requests get argmax drafts; sampled requests get drafts sampled from
the draft model's distribution under the request's own sampling parameters,
drawn from the request's own generator (so each request's draft randomness is
its own), and returned with those probabilities so verification stays
lossless; a request with position-keyed noise (coupled verification) takes the
exponential race's token at each draft position instead (``_pick``). With a
reduced draft vocabulary (``kept_token_ids``: the most frequent tokens) its
lm_head scores only those: most of a small draft model's step is its
vocabulary-wide lm_head.

Does not know: the target model, or what verification keeps.
"""

from __future__ import annotations

import torch

from speculab.models.config import ModelConfig
from speculab.models.draft_vocab import ReducedVocabulary
from speculab.models.llama import Transformer, causal_batch, prefill
from speculab.position_noise import coupled_tokens
from speculab.sampling import greedy_tokens, sampling_probs
from speculab.speculative.errors import VocabularyMismatchError
from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.tree import Draft


class DraftModelProposer(Proposer):
    prefix_chains = True  # a budgeted draft is the first steps of the same autoregressive draft
    name = "draft"

    def __init__(self, model: Transformer, *, num_speculative_tokens: int, kept_token_ids: torch.Tensor | None = None):
        """``kept_token_ids``: [n] target token ids the draft model may draft (its draft vocabulary, FR-Spec); None:
        the whole vocabulary."""
        if num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be at least 1")
        self.model = model
        self.k = self.max_draft_tokens = num_speculative_tokens
        self.device = model.norm.weight.device
        self.reduced = None if kept_token_ids is None else ReducedVocabulary.of(model, kept_token_ids)

    def state_bytes(self, num_slots: int, max_seq_len: int) -> int:
        return self.model.cache_bytes(num_slots, max_seq_len + self.k + 2)

    def bind(self, num_slots: int, max_seq_len: int, target: ModelConfig) -> None:
        if self.model.config.vocab_size != target.vocab_size:
            raise VocabularyMismatchError(
                f"draft model vocab_size {self.model.config.vocab_size} != target vocab_size {target.vocab_size}: "
                "a draft model must share the target's tokenizer"
            )
        self.cache = self.model.new_cache(num_slots, max_seq_len + self.k + 2)  # state_bytes counts the same
        self.synced = [0] * num_slots  # leading tokens of the request's sequence held by the cache
        self.pending: list[list[int]] = [[] for _ in range(num_slots)]  # draft tokens fed after those

    # -- slots ------------------------------------------------------------------
    def prefill_chunk(self, slot: int, prompt_ids: list[int], begin: int, end: int, features=None) -> None:
        prefill(self.model, self.cache, slot, prompt_ids[:end], start=begin)

    def admit(self, slot: int, request, features=None) -> None:
        # the positions the chunks ran are kept (a slot holds none between requests): the rest of the prompt is run
        prefill(self.model, self.cache, slot, request.prompt_ids, start=self.cache.lengths[slot])
        self._start(slot, request)

    @property
    def prompt_cache_key(self) -> object:
        return ("draft", id(self.model))

    def prompt_state(self, slot: int) -> torch.Tensor:
        return self.cache.export(slot)  # the draft model's KV of the prompt

    def admit_cached(self, slot: int, request, features, state: torch.Tensor) -> None:
        self.cache.load(slot, state)
        self._start(slot, request)

    def admit_head(self, slot: int, state: torch.Tensor, shared: int) -> int:
        held = min(shared, state.shape[2])  # position t holds token t's KV
        self.cache.load(slot, state[:, :, :held])
        return held

    def _start(self, slot: int, request) -> None:
        self.synced[slot], self.pending[slot] = len(request.prompt_ids), []

    def move(self, src: int, dst: int) -> None:
        self.cache.move(src, dst)
        self.synced[dst], self.pending[dst] = self.synced[src], self.pending[src]
        self.release(src)

    def release(self, slot: int) -> None:
        self.cache.free(slot)
        self.synced[slot], self.pending[slot] = 0, []

    # -- drafting -----------------------------------------------------------------
    def _catch_up(self, slot: int, sequence: list[int]) -> list[int]:
        """Roll the slot's cache back to what is still true and return the tokens to feed."""
        synced, pending = self.synced[slot], self.pending[slot]
        true_pending = 0
        while (
            true_pending < len(pending)
            and synced + true_pending < len(sequence)
            and pending[true_pending] == sequence[synced + true_pending]
        ):
            true_pending += 1
        keep = min(synced + true_pending, len(sequence) - 1)  # feed at least one token to get logits
        self.cache.keep_prefix(slot, keep)
        self.synced[slot], self.pending[slot] = len(sequence), []
        return sequence[keep:]

    def _pick(self, logits: torch.Tensor, requests, step: int) -> tuple[list[int], list[torch.Tensor | None]]:
        """One draft token per row, the ``step``-th of its draft: argmax for greedy requests, else a sample (with its
        distribution over the target's vocabulary).

        A sampled request with position-keyed noise (``position_noise.py``) takes the exponential race's token under
        its noise at the draft token's output position: the token plain sampling would emit there if the draft model
        were the target, which is what makes coupled verification accept it often. Any other sample is drawn from
        the request's own generator: rejection sampling is exact only when each draft token is a fresh draw from q,
        independent of every other request's.

        logits: [batch, vocab], or [batch, n] over a reduced vocabulary's kept tokens.
        """
        picked, probs, coupled = torch.tensor(greedy_tokens(logits)), [], {}
        for row, r in enumerate(requests):
            if r.params.greedy:
                probs.append(None)
                continue
            p = sampling_probs(logits[row : row + 1], r.params)[0]
            full = p if self.reduced is None else self.reduced.spread(p)
            if r.noise is not None:
                coupled[row] = coupled_tokens(full[None], r.noise.at([len(r.output_ids) + step]))[0]
            else:
                picked[row] = torch.multinomial(p, 1, generator=r.generator)[0]
            probs.append(full)
        tokens = (picked if self.reduced is None else self.reduced.to_target(picked)).tolist()
        for row, token in coupled.items():
            tokens[row] = token
        return tokens, probs

    def propose(self, state: ProposeState) -> list[Draft]:
        reqs = state.requests
        slots = [r.slot for r in reqs]
        tails = [self._catch_up(slot, r.prompt_ids + r.output_ids) for slot, r in zip(slots, reqs)]
        rows = torch.tensor(slots, device=self.device)
        start = torch.tensor([self.cache.lengths[s] for s in slots], device=self.device)
        width = max(map(len, tails))
        tokens = torch.tensor([t + [0] * (width - len(t)) for t in tails], device=self.device)
        last = torch.tensor([[len(t) - 1] for t in tails], device=self.device)
        head = None if self.reduced is None else self.reduced.logits
        logits = self.model(tokens, causal_batch(rows, start, width), self.cache, logits_at=last, lm_head=head).logits[:, 0]
        lengths = start + torch.tensor([len(t) for t in tails], device=self.device)
        drafted: list[list[int]] = [[] for _ in reqs]
        dists: list[list[torch.Tensor | None]] = [[] for _ in reqs]
        most = state.largest_budget()  # no step drafts more than any row may keep
        k = self.k if most is None else max(1, min(self.k, most))
        for step in range(k):
            picked, probs = self._pick(logits, reqs, step)
            for row in range(len(reqs)):
                drafted[row].append(picked[row])
                dists[row].append(probs[row])
            if step == k - 1:
                break
            feed = torch.tensor(picked, device=self.device)[:, None]
            logits = self.model(feed, causal_batch(rows, lengths, 1), self.cache, lm_head=head).logits[:, 0]
            lengths = lengths + 1
            for row, slot in enumerate(slots):
                self.pending[slot].append(picked[row])
        for row, slot in enumerate(slots):
            self.cache.commit(slot, int(lengths[row]))
        return [Draft.chain(tokens_, None if d[0] is None else torch.stack(d)) for tokens_, d in zip(drafted, dists)]
