"""A tuned policy as the engines would run it: ``speculab launch``'s own commands for vLLM and SGLang, not strict.

The tune prints, for each engine's newest known version, the speculative flags ``speculab launch`` writes for the
method under the tuned policy, with what the engine cannot express said in the command's notes (the expressible part
kept: the same translation, ``policy.engines``, that a launch refuses to cut short). They rest on speculab's costs
on this machine, not on the engines' own: ``speculab tune --engine vllm`` measures vLLM's.

Knows: which flags are the speculative ones. Does not know: any engine's flags (``launch/``).
"""

from __future__ import annotations

from pathlib import Path

from speculab.launch import sglang, vllm
from speculab.launch.command import LaunchRequest, UnsupportedLaunch
from speculab.methods import POLICY, MethodSpec

BUILDERS = {"vllm": (vllm.vllm_command, vllm.NEWEST_KNOWN), "sglang": (sglang.sglang_command, sglang.NEWEST_KNOWN)}


def engine_settings(spec: MethodSpec, policy_file: Path) -> dict:
    """{engine: {"version", "settings" (the speculative flags, or why none), "notes", "files", "basis"}}."""
    under_policy = MethodSpec(spec.name, {**spec.params, POLICY: str(policy_file)})
    out = {}
    for engine, (build, version) in BUILDERS.items():
        drafter = Path("DRAFTER") if spec.method.drafter else None
        request = LaunchRequest(engine, under_policy, Path("TARGET"), drafter, version, strict_policy=False, run_dir=Path("RUN"))
        basis = f"derived from speculab's costs on this machine, not measured on {engine}"
        try:
            command = build(request)
        except UnsupportedLaunch as e:
            out[engine] = {"version": str(version), "settings": "none", "notes": [str(e)], "files": {}, "basis": basis}
            continue
        flags = [f for f in command.flags if f.name.startswith("--speculative")]
        shown = " ".join(f.name if f.value is None else f"{f.name} '{f.value}'" for f in flags)
        out[engine] = {
            "version": str(version),
            "settings": shown or "none: plain decoding",
            "notes": list(command.notes),
            "files": {path.name: text for path, text in command.files},
            "basis": basis + (f"; `speculab tune --engine vllm --method {spec.text}` measures vLLM's own" if engine == "vllm" else ""),
        }
    return out
