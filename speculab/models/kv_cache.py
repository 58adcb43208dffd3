"""A static KV cache: one preallocated tensor, written at explicit positions.

Layout: ``[layers, slots, 2 * kv_heads, max_len, head_dim]``; keys are the first
``kv_heads`` heads of dim 2, values the rest. A slot belongs to one request at
a time; ``lengths[slot]`` is how many positions of it are committed.

Knows: rollback (keep a prefix), compaction (move an accepted tree path into
place after the context, in every layer at once), and the bytes a cache of given
dimensions comes to once written (``nbytes_for``). Does not know: which tokens
those positions hold, or what is allowed to attend to what (that is the mask's job).

Positions at or past ``lengths[slot]`` are garbage that the next forward
overwrites; no forward may attend to them, so rollback is bookkeeping only.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        # torch.zeros maps pages lazily, so an unused slot costs address space, not RAM.
        self.kv = torch.zeros(num_layers, num_slots, 2 * num_kv_heads, max_len, head_dim, dtype=dtype, device=device)
        self.lengths = [0] * num_slots
        self.max_len = max_len

    @staticmethod
    def nbytes_for(num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int, max_len: int, dtype: torch.dtype) -> int:
        """The bytes a cache of these dimensions holds once every position is written: its pages are mapped as they
        are written (``torch.zeros``), so this is what a full engine costs, not what a fresh one does."""
        return num_layers * num_slots * 2 * num_kv_heads * max_len * head_dim * torch.empty((), dtype=dtype).element_size()

    @property
    def num_slots(self) -> int:
        return self.kv.shape[1]

    def layer(self, i: int) -> Tensor:
        """Layer i's cache: [slots, 2*kv_heads, max_len, head_dim]."""
        return self.kv[i]

    def keep_prefix(self, slot: int, length: int) -> None:
        """Roll slot back to its first ``length`` positions."""
        if not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"slot {slot}: cannot keep {length} of {self.lengths[slot]} positions")
        self.lengths[slot] = length

    def commit(self, slot: int, length: int) -> None:
        """Mark positions up to ``length`` as holding real tokens."""
        if length > self.max_len:
            raise ValueError(f"slot {slot}: length {length} exceeds the cache's {self.max_len} positions")
        self.lengths[slot] = length

    def compact(self, slot: int, src_positions: Tensor, dst_start: int) -> None:
        """Move the entries at ``src_positions`` ([n], ascending) to ``dst_start .. dst_start+n-1``
        in every layer, and commit the slot up to there."""
        n = src_positions.numel()
        dst = torch.arange(dst_start, dst_start + n, device=src_positions.device)
        if not torch.equal(src_positions, dst):
            # index_select copies first, so overlapping source and destination are safe.
            moved = self.kv[:, slot].index_select(2, src_positions)
            self.kv[:, slot].index_copy_(2, dst, moved)
        self.commit(slot, dst_start + n)

    def export(self, slot: int) -> Tensor:
        """A copy of the slot's committed positions: [layers, 2*kv_heads, length, head_dim]."""
        return self.kv[:, slot, :, : self.lengths[slot]].clone()

    def load(self, slot: int, kv: Tensor) -> None:
        """Fill the slot with an ``export``ed copy and commit it."""
        n = kv.shape[2]
        self.commit(slot, n)
        self.kv[:, slot, :, :n].copy_(kv)

    def move(self, src: int, dst: int) -> None:
        """Move slot ``src``'s committed positions into slot ``dst`` (which becomes its owner)."""
        n = self.lengths[src]
        self.kv[:, dst, :, :n].copy_(self.kv[:, src, :, :n])
        self.lengths[dst], self.lengths[src] = n, 0

    def free(self, slot: int) -> None:
        self.lengths[slot] = 0
