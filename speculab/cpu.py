"""What this CPU can do, read once from /proc/cpuinfo.

Knows: the flags line and what speculab asks of it (native bf16: AMX or AVX512-BF16; the native kernels:
AVX2 with FMA).
Does not know: what to do about it (``runtime.py`` picks the dtype, ``models/linear.py`` the kernels).
"""

from __future__ import annotations

import functools
from pathlib import Path

REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")


@functools.cache
def cpu_flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def reported_cpu_flags() -> list[str]:
    """The flags that decide speculab's speed, as recorded beside every figure."""
    return sorted(cpu_flags() & set(REPORTED_FLAGS))


def cpu_has_native_bf16() -> bool:
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})


def cpu_has_avx2_fma() -> bool:
    return {"avx2", "fma"} <= cpu_flags()
