"""llama.cpp's own server, ``llama-server``, as a peer that speculates: its command and its greedy completions.

Knows: how a llama-server is started for one method of speculation (each flag with why, as ``speculab launch``
writes vLLM's): plain decoding; a draft model (``--spec-type draft-simple -md DRAFT --spec-draft-n-max K``); or
lookup in the request's own tokens (``--spec-type ngram-simple``, an n-gram of fixed size N whose latest earlier
occurrence supplies up to M draft tokens). One slot, loopback, the given threads for target and draft alike, a
context sized to the prompts. And how one greedy completion is asked of it (``/completion`` with the prompt as
token ids, ``n_predict`` tokens, EOS ignored, no prompt cache) and read back: the tokens, and the server's own
timings (``predicted_n`` tokens in ``predicted_ms``, prefill excluded; ``draft_n`` drafted and ``draft_n_accepted``).

Does not know: how the binary is built (``launch.environments.llama_server``), how the draft becomes a GGUF
(``gguf_draft``), or how the runs take turns (``speculation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
from packaging.version import Version

from speculab.launch.command import Flag, LaunchCommand
from speculab.launch.environments import LLAMA_CPP_PYTHON_VERSION

DRAFT_MODEL, LOOKUP = "draft-simple", "ngram-simple"  # the --spec-type values speculab compares (methods' llama_cpp)


@dataclass(frozen=True, kw_only=True)
class LlamaServerSpec:
    """One llama-server: the target, and what it speculates with (``spec_type``: llama.cpp's ``--spec-type``, None:
    plain decoding)."""

    binary: Path
    target: Path  # the target's GGUF
    spec_type: str | None = None
    draft: Path | None = None  # the draft model's GGUF (draft-simple)
    draft_max: int = 3  # --spec-draft-n-max (draft-simple) or the m-gram's size M (ngram-simple)
    ngram_size: int | None = None  # the lookup n-gram's size N (ngram-simple; `speculab compare --ngram-size`)
    threads: int = 2
    context: int = 4096
    port: int = 8090


def _speculation_flags(spec: LlamaServerSpec) -> list[Flag]:
    if spec.spec_type == DRAFT_MODEL:
        if spec.draft is None:
            raise ValueError("llama-server's draft-model speculation needs a draft GGUF")
        return [
            Flag("--spec-type", DRAFT_MODEL, "speculation by a standalone draft model"),
            Flag("-md", str(spec.draft), "the draft model, converted from speculab's drafter by llama.cpp's converter"),
            Flag("--spec-draft-n-max", str(spec.draft_max), "draft tokens a step: speculab's num_speculative_tokens"),
            Flag("-td", str(spec.threads), "the draft model's threads, as the target's"),
            Flag("-tbd", str(spec.threads), "the draft model's batch threads, as the target's"),
        ]
    if spec.spec_type == LOOKUP:
        if spec.ngram_size is None:
            raise ValueError("llama-server's lookup decoding needs the n-gram's size")
        return [
            Flag("--spec-type", LOOKUP, "lookup in the request's own tokens: llama.cpp's prompt-lookup decoding"),
            Flag("--spec-ngram-simple-size-n", str(spec.ngram_size), "the n-gram looked up"),
            Flag("--spec-ngram-simple-size-m", str(spec.draft_max), "draft tokens a step: speculab's num_speculative_tokens"),
        ]
    if spec.spec_type is not None:
        raise ValueError(f"llama-server --spec-type must be {DRAFT_MODEL} or {LOOKUP} here, not {spec.spec_type!r}")
    return []


def llama_server_command(spec: LlamaServerSpec) -> LaunchCommand:
    flags = [
        Flag("-m", str(spec.target), "the target's GGUF"),
        Flag("--host", "127.0.0.1", "loopback only"),
        Flag("--port", str(spec.port), "where the comparison sends its requests"),
        Flag("-np", "1", "one slot: requests one at a time, as at batch 1"),
        Flag("-c", str(spec.context), "the context: the longest prompt and its completion fit"),
        Flag("-t", str(spec.threads), "decode threads, as speculab's"),
        Flag("-tb", str(spec.threads), "prefill threads, as speculab's"),
        *_speculation_flags(spec),
    ]
    return LaunchCommand(
        engine="llama.cpp",
        version=Version(LLAMA_CPP_PYTHON_VERSION),
        program=(str(spec.binary),),
        flags=tuple(flags),
        port=spec.port,
        served_name=spec.spec_type or "plain",
        notes=(f"llama.cpp as vendored by llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}",),
        cpu=True,
    )


@dataclass(frozen=True)
class Completion:
    tokens: list[int]
    predicted_n: int  # tokens generated, as the server counts them
    predicted_ms: float  # their time, prefill excluded
    draft_n: int  # draft tokens proposed (0 without speculation)
    draft_accepted: int


def complete(url: str, prompt_ids: list[int], max_tokens: int, timeout: float = 600.0) -> Completion:
    """One greedy completion of exactly ``max_tokens`` tokens (EOS ignored) for the token-id prompt."""
    body = {
        "prompt": [int(t) for t in prompt_ids],
        "n_predict": max_tokens,
        "temperature": 0.0,
        "top_k": 1,
        "ignore_eos": True,
        "cache_prompt": False,
        "return_tokens": True,
        "stream": False,
    }
    response = httpx.post(f"{url}/completion", json=body, timeout=timeout)
    if response.status_code != 200:
        raise RuntimeError(f"llama-server answered {response.status_code}: {response.text[:500]}")
    data = response.json()
    timings = data.get("timings") or {}
    return Completion(
        tokens=[int(t) for t in data.get("tokens") or []],
        predicted_n=int(timings.get("predicted_n", 0)),
        predicted_ms=float(timings.get("predicted_ms", 0.0)),
        draft_n=int(timings.get("draft_n", 0)),
        draft_accepted=int(timings.get("draft_n_accepted", 0)),
    )
