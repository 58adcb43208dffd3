"""How the real engines run one of speculab's methods: the descriptors a method's entry in ``methods.METHODS`` carries.

Data only, so that everything method-specific sits in the one table: vLLM's and SGLang's name for the method, which of
the spec's parameters become which of their settings, the versions that run it and the layout its drafter is exported
in (llama.cpp's name for the same speculation is a plain string on the entry, ``Method.llama_cpp``). Read by
``launch/vllm.py``, ``launch/sglang.py`` and ``launch/export.py``, which know the engines' flags and versions but no
method by name.

Sources: vLLM's ``engine/arg_utils.py`` and ``config/speculative.py`` of each release (0.32.0 installed by
``make vllm``), SGLang's ``srt/server_args.py`` (recorded in ``tests/launch/fixtures/``), llama.cpp's
``common/arg.cpp`` as ``make llamacpp`` builds it, and the study's ERRATA.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Layout:
    """A drafter as an engine loads it (``speculab export`` writes it)."""

    architecture: str | None = None  # config.json's ``architectures``; None: a clean HF folder, weights as they are
    fold_fc_bias: bool = False  # an EAGLE-1 head's fc bias folded into attention biases (vLLM's fc has none)


@dataclass(frozen=True)
class VersionGap:
    """Versions from ``since`` up to ``until`` (excluded) that cannot run a method which others before and after can."""

    since: str
    until: str
    why: str


@dataclass(frozen=True, kw_only=True)
class OnVllm:
    """A method on vLLM: ``--speculative-config`` from 0.8.3, the V0 flags before."""

    method: str  # --speculative-config's "method"
    settings: dict[str, str]  # --speculative-config key -> the spec parameter that sets it
    drafts_with: str  # what vLLM drafts with, and what num_speculative_tokens means, said beside the flag
    since: str = "0"  # the first version that runs it
    since_why: str = ""  # where it arrived (a PR), said in the refusal
    gap: VersionGap | None = None
    v0_model: str | None = None  # up to 0.8.2: --speculative-model's value; None: the exported drafter folder
    v0_flags: dict[str, str] = field(default_factory=dict)  # up to 0.8.2: its own flag -> the spec parameter
    head_at_tp_one: bool = False  # before 0.11 the head must run unsplit (V0: "EAGLE does not support TP > 1")
    layout: Layout = Layout()


@dataclass(frozen=True, kw_only=True)
class OnSglang:
    """A method on SGLang: ``--speculative-algorithm`` and the flags that shape its draft."""

    algorithm: str  # --speculative-algorithm
    drafts_with: str  # said beside --speculative-algorithm
    since: str = "0"  # the first version whose choices have the algorithm
    # how the draft's shape is said: "tree" (num_steps, topk, num_draft_tokens from the spec), "chain" (the chain's
    # length as num_steps, topk 1), "lookup" (num_draft_tokens alone: the chain plus its root)
    shape: Literal["tree", "chain", "lookup"] = "tree"
    lookup_windows_until: str | None = None  # NGRAM: its min/max match-window flags exist before this version
    token_map_from: str | None = None  # EAGLE-1/2: --speculative-token-map (FR-Spec) from this version
    adapts: bool = False  # --speculative-adaptive can change its steps with the batch size (EAGLE chains)
    layout: Layout = Layout()
