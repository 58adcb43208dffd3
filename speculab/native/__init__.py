"""speculab's C++ kernels, built from source with the machine's compiler (``make setup`` runs ``python -m speculab.native``).

Knows: how to build the extension (``torch.utils.cpp_extension``, ninja, ``-O3 -march=native``), where a
build lives (the cache folder, keyed by torch's version, the sources' hash and the checkout and environment
that build it, so a changed source or torch is rebuilt, never loaded stale, and two checkouts never rebuild
each other's build), and when it cannot run here (no AVX2/FMA, or ``SPECULAB_NATIVE=0``).
Also: on a CPU with AMX, weights are packed for the AMX kernel unless ``SPECULAB_AMX=0`` (the AVX512 FMA kernel
instead: faster at one row, slower from 8 rows; BENCHMARKS.md, "Verify cost").
Does not know: when a kernel pays (``models/linear.py`` decides); without a build, callers keep the
pure-PyTorch path, which stays tested.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import torch

from speculab.cpu import cpu_flags, cpu_has_avx2_fma
from speculab.files import cache_dir

HERE = Path(__file__).parent
SOURCES = tuple(
    HERE / f
    for f in (
        "module.cpp",
        "bf16_linear.cpp",
        "bf16_linear_avx512.cpp",
        "bf16_linear_amx.cpp",
        "attention.cpp",
        "attention_avx2.cpp",
        "attention_avx512.cpp",
        "attention_amx.cpp",
        "ops.cpp",
        "layers.cpp",
        "suffix_tree.cpp",
    )
)
HEADERS = tuple(HERE / f for f in ("bf16_linear.h", "attention.h", "attention_next.h", "ops.h", "layers.h", "vec_math.h", "suffix_tree.h"))
NAME = "speculab_native"
FLAGS = ("-O3", "-march=native", "-fopenmp")


def build_dir() -> Path:
    digest = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        digest.update(source.read_bytes())
    digest.update(" ".join(FLAGS).encode())
    digest.update(" ".join(sorted(cpu_flags())).encode())  # -march=native: a build is for this CPU only
    # ninja rebuilds whenever a compile command changes, and the commands name this checkout's sources and this
    # environment's headers: two checkouts (or venvs) sharing one folder would rebuild each other's build every time
    digest.update(f"{HERE}\0{sys.prefix}".encode())
    return cache_dir() / "native" / f"torch-{torch.__version__}-{digest.hexdigest()[:12]}"


def disabled_reason() -> str | None:
    """Why the kernels cannot be used here, or None."""
    if os.environ.get("SPECULAB_NATIVE", "1") == "0":
        return "SPECULAB_NATIVE=0"
    if not cpu_has_avx2_fma():
        return "this CPU has no AVX2/FMA"
    return None


def build(verbose: bool = False) -> ModuleType:
    """Compile (about a minute on 2 cores) or reuse the build for these sources and this torch."""
    from torch.utils import cpp_extension

    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    # ninja may be installed in this environment only (the `ninja` dependency): its bin folder goes first on PATH
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    sources = [str(s) for s in SOURCES]
    return cpp_extension.load(NAME, sources, extra_cflags=[*FLAGS, f"-I{HERE}"], build_directory=str(folder), verbose=verbose)


@functools.cache
def kernels() -> ModuleType | None:
    """The built kernel module, or None (with a one-line note on stderr when it was never built)."""
    if disabled_reason():
        return None
    library = build_dir() / f"{NAME}.so"
    if not library.is_file():
        print(f"[speculab] note: native kernels not built ({library}); run `make setup`. Using the PyTorch path.", file=sys.stderr)
        return None
    spec = importlib.util.spec_from_file_location(NAME, library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.use_amx(os.environ.get("SPECULAB_AMX", "1") != "0")
    return module
