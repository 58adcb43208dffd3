"""The prompt cache: prompts' prefill kept for the next request that sends them, whole or as the head of another.

Knows: what a cached prompt holds (its KV, last logits, the features proposers read, drafters' own prompt states), how
one is found for a new prompt (the same tokens, or the longest shared head) and its bytes.
Does not know: how a prefill runs or how a slot is filled (``engine.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class CachedPrompt:
    kv: torch.Tensor  # [layers, 2*kv_heads, prompt_len, head_dim]
    logits: torch.Tensor  # [vocab] at the prompt's last position
    features: torch.Tensor  # [prompt_len, width]
    drafter_states: dict = field(default_factory=dict)  # proposer.prompt_cache_key -> proposer.prompt_state


class PromptCache:
    """Prompt caching: a prompt seen before skips its prefill, and one that shares a head with a cached prompt
    prefills only the rest.

    A whole prompt's KV, last logits and the features the proposer reads are copied into the new slot, so what
    follows is exactly what a fresh prefill gives. A drafter's own prompt state (a draft model's KV, an EAGLE head's
    KV) is kept beside them, so a cached prompt skips the drafter's prefill too. A prompt that is not cached but
    begins with the same tokens as a cached one (the same files before another request, as agents send them) takes
    that head's KV, features and its drafter's share of the head (``Proposer.admit_head``), and runs only the tokens
    after it (``prefix_hits``, ``reused_tokens``). Keyed by the prompt's token ids and the feature layers; shared by
    engines of one target. With ``max_bytes`` (a server's, whose prompts never end) a new prompt's entry replaces the
    entries of the prompts it extends, and the least recently used entries leave once the cached bytes pass it;
    without, every entry stays until the cache is dropped (the benchmark's prompts are few and known). An entry is
    copied into a slot when a request takes it, so one that leaves never leaves from under a running request.
    """

    def __init__(self, max_bytes: int | None = None):
        self.entries: dict[tuple, CachedPrompt] = {}  # least recently used first
        self.max_bytes = max_bytes
        self.hits = self.misses = self.prefix_hits = self.reused_tokens = self.evicted = self.superseded = 0

    def key(self, prompt_ids: list[int], feature_layers: tuple[int, ...]) -> tuple:
        return (tuple(prompt_ids), feature_layers)

    def get(self, key: tuple) -> CachedPrompt | None:
        """The entry of exactly ``key``'s prompt, now the most recently used; None where there is none."""
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.entries[key] = entry
        return entry

    def put(self, key: tuple, entry: CachedPrompt) -> CachedPrompt:
        """Keep ``entry`` as the most recently used, the least recently used leaving past ``max_bytes``. Under a cap,
        the cached prompts that ``entry``'s extends leave first (``superseded``): it holds their KV, so a prompt that
        shared a head with one of them shares it with ``entry`` (an agent's earlier turns, which each next turn
        resends; one sent again whole takes all but its last token from ``entry``)."""
        if self.max_bytes is not None:
            for old in [k for k in self.entries if _extends(key, k)]:
                del self.entries[old]
                self.superseded += 1
        self.entries[key] = entry
        self.evict()
        return entry

    def evict(self) -> None:
        """The least recently used entries leave until the cached bytes are within ``max_bytes`` (an entry that alone
        passes it leaves too)."""
        while self.max_bytes is not None and self.entries and self.nbytes > self.max_bytes:
            del self.entries[next(iter(self.entries))]
            self.evicted += 1

    def longest_head(self, key: tuple) -> tuple[CachedPrompt | None, int]:
        """The cached prompt (same feature layers) that shares the most leading tokens with ``key``'s, and how many
        it shares: at most all but the last, whose logits a prefill must give."""
        ids, layers = key
        best, shared = None, 0
        for cached_ids, cached_layers in self.entries:
            if cached_layers != layers:
                continue
            n = _shared_head(cached_ids, ids, len(ids) - 1)
            if n > shared:
                best, shared = (cached_ids, cached_layers), n
        return (self.get(best), shared) if best is not None else (None, 0)

    @property
    def nbytes(self) -> int:
        """What the cached prompts hold: their KV, logits, features and drafters' states."""
        tensors = [t for e in self.entries.values() for t in (e.kv, e.logits, e.features, *e.drafter_states.values())]
        return sum(t.nbytes for t in tensors if isinstance(t, torch.Tensor))


def _extends(key: tuple, other: tuple) -> bool:
    """Whether ``key``'s prompt is ``other``'s and more, under the same feature layers."""
    (ids, layers), (other_ids, other_layers) = key, other
    return layers == other_layers and len(other_ids) < len(ids) and ids[: len(other_ids)] == other_ids


def _shared_head(a: tuple, b: tuple, most: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``most``: a bisection over slices, each compared in C."""
    low, high = 0, min(len(a), len(b), most)  # the first low are shared; more than high are not
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low
