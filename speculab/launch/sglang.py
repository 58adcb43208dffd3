"""SGLang's command line for each speculab method, by SGLang version.

Knows (sources: SGLang's ``srt/server_args.py`` of each release, recorded in
``tests/launch/fixtures/``, and the study's ERRATA.md):
- ``--speculative-algorithm`` EAGLE, EAGLE3 (from 0.4.4), STANDALONE (a draft model, from 0.5.2,
  sglang#10090) and NGRAM (from 0.5.3); none before those versions;
- the full flag names: ``--speculative-draft-model-path`` (``--speculative-draft`` was only an
  argparse prefix), and ``--speculative-num-steps``, ``--speculative-eagle-topk``,
  ``--speculative-num-draft-tokens`` given together, as SGLang's docs ask;
- ``--speculative-token-map`` for an EAGLE-1/2 head's reduced draft vocabulary (FR-Spec), a file of
  the kept token ids (``speculab export --for sglang`` writes it);
- ``--enable-metrics``: without it SGLang has no ``/metrics``.

SGLang has no CPU build: speculab writes its commands and starts them from a Python the user names;
they are checked against the recorded parsers, not run here.

Does not know: how a process is run (``server.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from packaging.version import Version

from speculab.launch.command import Flag, LaunchCommand, LaunchRequest, UnsupportedLaunch, served_flags

EAGLE3_FROM = Version("0.4.4")  # absent from 0.4.3.post2's choices, present in 0.5.2's
TOKEN_MAP_FROM = Version("0.4.4")  # FR-Spec came with EAGLE-3 support; absent in 0.4.3.post2, present in 0.5.2
STANDALONE_FROM = Version("0.5.2")
NGRAM_FROM = Version("0.5.3")
NGRAM_TRIE_FROM = Version("0.5.23")  # the first recorded version whose n-gram matcher has no window-size flags
NEWEST_KNOWN = Version("0.5.23")


def _require(req: LaunchRequest, since: Version, algorithm: str) -> None:
    if req.version < since:
        raise UnsupportedLaunch(f"SGLang {req.version} has no --speculative-algorithm {algorithm}: it arrived in {since}")


def _drafter(req: LaunchRequest) -> str:
    if req.drafter is None:
        raise UnsupportedLaunch(f"--method {req.spec.name} needs a drafter folder (--draft)")
    return str(req.drafter)


def _tree(steps: int, topk: int, tokens: int) -> list[Flag]:
    return [
        Flag("--speculative-num-steps", str(steps), "draft depth"),
        Flag("--speculative-eagle-topk", str(topk), "branches kept per step (1: a chain)"),
        Flag("--speculative-num-draft-tokens", str(tokens), "tokens verified per step; SGLang wants all three set together"),
    ]


def _eagle(algorithm: str, since: Version) -> Callable[[LaunchRequest], list[Flag]]:
    def flags(req: LaunchRequest) -> list[Flag]:
        _require(req, since, algorithm)
        p = req.spec.params
        out = [
            Flag("--speculative-algorithm", algorithm, f"an {algorithm.replace('EAGLE', 'EAGLE-').rstrip('-')} head"),
            Flag("--speculative-draft-model-path", _drafter(req), "the head folder (speculab export --for sglang)"),
            *_tree(p["num_steps"], p["topk"], p["num_draft_tokens"]),
        ]
        if req.token_map is not None and req.version >= TOKEN_MAP_FROM and algorithm == "EAGLE":
            out.append(Flag("--speculative-token-map", str(req.token_map), "the reduced draft vocabulary (FR-Spec): the kept token ids"))
        return out

    return flags


def _standalone(req: LaunchRequest) -> list[Flag]:
    _require(req, STANDALONE_FROM, "STANDALONE")
    k = req.spec.params["num_speculative_tokens"]
    return [
        Flag("--speculative-algorithm", "STANDALONE", "a standalone draft model (sglang#10090)"),
        Flag("--speculative-draft-model-path", _drafter(req), "a clean HF folder (speculab export --for sglang)"),
        *_tree(k, 1, k + 1),
    ]


def _ngram(req: LaunchRequest) -> list[Flag]:
    _require(req, NGRAM_FROM, "NGRAM")
    p = req.spec.params
    flags = [
        Flag("--speculative-algorithm", "NGRAM", "n-gram lookup; no drafter model"),
        Flag("--speculative-num-draft-tokens", str(p["num_speculative_tokens"] + 1), "tokens verified per step, the root included"),
    ]
    if req.version < NGRAM_TRIE_FROM:
        flags += [
            Flag("--speculative-ngram-min-match-window-size", str(p["prompt_lookup_min"]), "shortest n-gram matched"),
            Flag("--speculative-ngram-max-match-window-size", str(p["prompt_lookup_max"]), "longest n-gram matched"),
        ]
    return flags


ALGORITHMS: dict[str, Callable[[LaunchRequest], list[Flag]]] = {
    "baseline": lambda req: [],
    "eagle": _eagle("EAGLE", Version("0.0")),
    "eagle3": _eagle("EAGLE3", EAGLE3_FROM),
    "draft": _standalone,
    "ngram": _ngram,
}


def sglang_command(req: LaunchRequest) -> LaunchCommand:
    if req.spec.params.get("disable_by_batch_size") is not None:
        raise UnsupportedLaunch("disable_by_batch_size: SGLang has no such switch; measure the batch sizes instead")
    if req.spec.params.get("policy") is not None:
        raise UnsupportedLaunch("policy: speculab's per-request draft caps have no SGLang equivalent; run the method without it")
    name = req.served_name or req.target.name
    program = (
        (*req.program, "--model-path", str(req.target))
        if req.program
        else ("python", "-m", "sglang.launch_server", "--model-path", str(req.target))
    )
    flags = [*served_flags(req.port, name), Flag("--enable-metrics", None, "/metrics with the speculative counters speculab reads")]
    if req.tp > 1:
        flags.append(Flag("--tp-size", str(req.tp), "the target split over this many GPUs"))
    if req.dtype:
        flags.append(Flag("--dtype", req.dtype, "the dtype of speculab's own cells: like with like"))
    if req.max_model_len:
        flags.append(Flag("--context-length", str(req.max_model_len), "the workload's prompt + output fit"))
    if req.spec.name not in ALGORITHMS:  # suffix: SGLang's port (sglang#13553) was closed unmerged
        raise UnsupportedLaunch(f"--method {req.spec.name}: SGLang has no such algorithm; launch it on vLLM")
    flags += ALGORITHMS[req.spec.name](req)
    omitted = [Flag("--speculative-draft", None, "never an SGLang flag: only an argparse prefix, ambiguous in newer versions")]
    return LaunchCommand("sglang", req.version, program, tuple(flags), (), tuple(omitted), req.port, name, _notes(req))


def _notes(req: LaunchRequest) -> tuple[str, ...]:
    notes = []
    if req.spec.name == "ngram" and req.version >= NGRAM_TRIE_FROM:
        notes.append(
            f"SGLang {req.version} matches n-grams in a trie with its own depth and breadth settings: "
            "prompt_lookup_min/max have no equivalent and its defaults apply"
        )
    if req.token_map is not None and (req.version < TOKEN_MAP_FROM or req.spec.name != "eagle"):
        notes.append("no --speculative-token-map here: the head drafts over the whole vocabulary")
    return tuple(notes)
