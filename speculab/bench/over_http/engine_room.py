"""The room a launched engine is given for a run's requests, and whether the machine has it.

vLLM-CPU allocates its KV cache whole when it starts (``VLLM_CPU_KVCACHE_SPACE``) and refuses a request longer than
``--max-model-len``. At an agent-length context the defaults (2,048 positions, 1 GiB) hold neither one request nor a
batch of them: with too little cache vLLM queues requests, and a cell would time a smaller batch than it names. A
cache larger than the free memory gets the server killed by the kernel, with no word. So before each launch the run
sizes both from the requests it will send (positions for the longest; the cache for the largest batch of the
longest) and adds up the server's bytes against the memory free now. The batch sizes whose cache would not fit are
recorded as skipped, with their bytes, and the server is launched for the rest.

Knows: token counts, a method's memory figures (``method_memory``) and the server's own bytes beside its weights and
cache (measured). Does not know: an engine's flags (``speculab.launch``) or how cells are measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from speculab.bench.memory_fit import skipped_cell
from speculab.free_memory import GIB, gib, usable_bytes
from speculab.launch.command import DEFAULT_KV_CACHE_GIB, ServingRoom
from speculab.launch.prepare import CPU_CONTEXT

POSITIONS_STEP = 256  # --max-model-len rounded up to a multiple of this
AFTER_PROMPT = 16  # positions a request needs beyond its prompt and output: the proposed tokens a verify appends
# vLLM-CPU 0.32's three processes (API server, engine core and worker, each with torch loaded) beside the weights and KV
# cache: 2.35 GB of RSS serving SmolLM2-135M in fp32 after a 3.9k-token request (6.11 GB with a 3 GiB cache; EPYC Zen 1,
# "Context length" in BENCHMARKS.md), rounded up
ENGINE_PROCESS_BYTES = 3 * GIB


@dataclass(frozen=True)
class EngineRoom:
    """What one launch is given, and which of the batch sizes asked of it fit."""

    room: ServingRoom
    batch_sizes: tuple[int, ...]  # those the server is launched for
    engine_bytes: dict[int, int]  # batch size -> the server's bytes with a cache for it
    available_bytes: int
    skipped: dict[int, str] = field(default_factory=dict)  # batch size -> why, with the bytes

    def skipped_cells(self, label: str, method: str) -> list[dict]:
        """The records of the batch sizes not measured (never left out in silence)."""
        return [skipped_cell(label, method, b, why, self.engine_bytes[b], self.available_bytes) for b, why in self.skipped.items()]


def engine_room(
    estimate: dict, prompt_tokens: list[int], batch_sizes: list[int], max_tokens: int, available: int, tp: int = 1
) -> EngineRoom:
    """The room for ``batch_sizes`` of requests of ``prompt_tokens`` (each prompt's length) and ``max_tokens`` out;
    ``estimate``: the method's memory figures (``method_memory.memory_estimate``) in the engine's dtype; ``available``:
    the bytes free now; ``tp``: the server's ranks, each holding a cache and a process of its own."""
    after = max_tokens + AFTER_PROMPT
    longest = max(prompt_tokens) + after
    positions = max(CPU_CONTEXT, math.ceil(longest / POSITIONS_STEP) * POSITIONS_STEP)
    by_length = sorted(prompt_tokens, reverse=True)
    per_token = estimate["kv_bytes_per_token_per_device"]

    def cache_gib(batch_size: int) -> int:
        tokens = sum(by_length[:batch_size]) + batch_size * after  # the batch's longest requests, all at once
        return max(DEFAULT_KV_CACHE_GIB, math.ceil(max(tokens, positions) * per_token / GIB))

    needed = {b: estimate["weights_bytes_per_device"] + tp * (ENGINE_PROCESS_BYTES + cache_gib(b) * GIB) for b in batch_sizes}
    fits = tuple(b for b in batch_sizes if needed[b] <= usable_bytes(available))
    skipped = {
        b: f"the server needs {gib(needed[b])} ({cache_gib(b)} GiB of KV cache for {b} requests of up to {longest} tokens) "
        f"and {gib(available)} is free"
        for b in batch_sizes
        if b not in fits
    }
    room = ServingRoom(positions, cache_gib(max(fits)) if fits else None)
    return EngineRoom(room, fits, needed, available, skipped)
