"""What memory is free now, and the refusal, with the numbers, of an allocation that would not fit in it.

A KV cache is allocated at its full size up front but its pages are mapped as they are written, so an engine that
does not fit is not refused by the allocator: the process grows until the kernel's OOM killer ends it, with no
message. Whatever allocates an engine (``Engine``, ``speculab serve``, ``speculab tune``, the rounds of ``speculab
bench``) adds up its bytes first and asks here.

Knows: the kernel's ``MemAvailable`` and the cgroup's limit (v2 ``memory.max`` less ``memory.current``: a container
may see the host's memory in ``/proc/meminfo``), and CUDA's free memory for a CUDA device. Does not know: what the
bytes are for (the callers count them: ``engine.engine_bytes``).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

# kept free beyond what an allocation counts: activations, logits, the allocator's slack and the rest of the process
MARGIN = 0.10
CGROUP = Path("/sys/fs/cgroup")
GIB = 1 << 30


class MemoryShortfall(ValueError):
    """An allocation that would not fit in the memory free now; the message says how much each side is."""


def available_bytes(device: torch.device | str = "cpu") -> int:
    """Bytes an allocation on ``device`` may take now: CUDA's free memory, or the smaller of ``MemAvailable`` and the
    cgroup's room."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    room = [_mem_available()]
    limit, used = _read(CGROUP / "memory.max"), _read(CGROUP / "memory.current")
    if limit is not None and used is not None:
        room.append(max(0, limit - used))
    known = [r for r in room if r is not None]
    return min(known) if known else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def usable_bytes(available: int) -> int:
    """What of ``available`` an allocation may count on, the margin kept free."""
    return int(available * (1 - MARGIN))


def require(needed: int, what: str, device: torch.device | str = "cpu", available: int | None = None) -> None:
    """Refuse ``what`` (said in the message, with how to need less) when ``needed`` bytes do not fit."""
    available = available_bytes(device) if available is None else available
    if needed > usable_bytes(available):
        raise MemoryShortfall(
            f"{what} needs {gib(needed)} and {gib(available)} is free ({MARGIN:.0%} of it kept for the rest of the "
            "process): fewer slots or a shorter context would fit"
        )


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _read(path: Path) -> int | None:
    """A cgroup file's number; None when absent or ``max`` (no limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
