"""Decoding methods: the one table of everything method-specific, ``name[:key=value,...]`` specs, and their proposers.

The one place where a method lives: ``speculab generate``, ``bench``, ``serve``, ``tune``, ``launch``, ``export``,
``compare`` and ``train`` all read a method's entry in ``METHODS`` and build its proposer from a :class:`MethodSpec`
parsed here, so a label in BENCHMARKS.md names exactly what any command runs. An entry says: the proposer class, every
parameter with its default, how its drafter is loaded, its memory kind, how its draft becomes a chain (for engines that
verify chains), its names and settings on vLLM and SGLang (``method_engines.py``), llama.cpp's name for the same
speculation, and its training recipe. Nothing else in speculab keeps a table keyed by method name; adding a method is
one entry here (its proposer's file in ``speculative/`` aside).

Every speculative method takes ``policy`` (``speculab/policy/``): a named policy, a file, ``auto`` or ``off``.

Knows: the entries, spec parsing and defaults, a spec's policy. Does not know: timing, HTTP, engines' flags by version
(``launch/``), memory arithmetic (``models/memory.py``) or training (``train/``, which ``recipe`` names lazily: the
trainer is built on this table, so the table may not import it). The fixed-tree EAGLE proposer is a Python-API option.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speculab.drafters import draft_model_options, draft_vocab_size, eagle_options
from speculab.method_engines import Layout, OnSglang, OnVllm, VersionGap
from speculab.policy.store import tuned_policy
from speculab.policy.table import AUTO, SpeculationPolicy, policy_value, read_policy
from speculab.speculative.draft_model import DraftModelProposer
from speculab.speculative.eagle import Eagle3Proposer, EagleProposer
from speculab.speculative.ngram import NgramProposer
from speculab.speculative.policy_proposer import PolicyProposer
from speculab.speculative.proposer import Proposer
from speculab.speculative.suffix import SuffixProposer

ASSETS = Path(__file__).resolve().parent / "assets"
DEFAULT_DRAFT = ASSETS / "smollm2-135m-draft"
DEFAULT_EAGLE = ASSETS / "smollm2-135m-eagle"
DEFAULT_EAGLE3 = ASSETS / "smollm2-135m-eagle3"
POLICY = "policy"  # every speculative method's: its speculation policy (speculab/policy/table.py)


@dataclass(frozen=True, kw_only=True)
class Method:
    proposer: type[Proposer]  # its class, whose ``name`` is the method's
    defaults: dict[str, Any] = field(default_factory=dict)  # every parameter the spec takes, with its default
    build: Callable[[dict, Any, int | None], dict] | None = None  # (params, loaded target, auto draft vocab) -> options
    drafter: str | None = None  # the params key naming the drafter's folder
    memory_kind: str | None = None  # drafter kind for models.memory.estimate
    auto_draft_vocab: int | None = None  # draft_vocab=auto: tokens kept where the drafter ships a token ranking
    chain: str | None = None  # the parameter that is its chain's length (for a tree: its depth, num_steps)
    tree: bool = False  # drafts trees (topk, num_draft_tokens): engines that verify chains run num_steps as a chain
    vllm: OnVllm | None = None
    sglang: OnSglang | None = None
    sglang_missing: str = ""  # why SGLang cannot run it, where it cannot
    llama_cpp: str | None = None  # llama-server's --spec-type for the same speculation (speculab compare llama.cpp)
    recipe: str | None = None  # "module:Class" of its training recipe (speculab train NAME)
    remembers: str | None = None  # the params key: how many earlier requests' outputs it drafts from

    def options(self, params: dict, loaded) -> dict:
        """The proposer's constructor options for ``params`` (the policy left out), drafters loaded."""
        given = {k: v for k, v in params.items() if k != POLICY}
        return given if self.build is None else self.build(given, loaded, self.auto_draft_vocab)

    def recipe_class(self) -> type:
        """Its training recipe, imported now (``speculab train`` only)."""
        module, _, name = (self.recipe or "").partition(":")
        if not name:
            raise ValueError(f"{self.proposer.name}: no training recipe")
        return getattr(importlib.import_module(module), name)


def _eagle_build(eagle3: bool) -> Callable[[dict, Any, int | None], dict]:
    return lambda params, loaded, auto: eagle_options(params, loaded, auto, eagle3=eagle3)


# shared:4 spreads 4 draft nodes a step over the batch: the whole 3-node tree at batch 1, 2 nodes a request at batch
# 2, one from batch 3 on, where a verify step is compute-bound and only the first draft token pays (BENCHMARKS.md)
EAGLE_TREE = {"num_steps": 3, "topk": 2, "num_draft_tokens": 4}
EAGLE_POLICY = "shared:4"
EAGLE_PARAMS = {"draft_vocab": "auto", POLICY: EAGLE_POLICY}
EAGLE_VLLM = {"num_speculative_tokens": "num_steps"}
CHAIN_VLLM = {"num_speculative_tokens": "num_speculative_tokens"}
# vLLM <= 0.8.2 takes a drafter for EAGLE only when its folder's name holds "eagle-" (launch.prepare names it so)
SGLANG_HEAD = Layout("LlamaForCausalLMEagle")
EAGLE3_HEAD = Layout("LlamaForCausalLMEagle3")

METHODS: dict[str, Method] = {
    "baseline": Method(proposer=Proposer),
    "ngram": Method(
        proposer=NgramProposer,
        defaults={"num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5, POLICY: None},
        chain="num_speculative_tokens",
        vllm=OnVllm(
            method="ngram",
            settings={**CHAIN_VLLM, "prompt_lookup_min": "prompt_lookup_min", "prompt_lookup_max": "prompt_lookup_max"},
            drafts_with="n-gram lookup in the prompt and output; no drafter model; num_speculative_tokens = chain length",
            v0_model="[ngram]",
            v0_flags={"--ngram-prompt-lookup-max": "prompt_lookup_max", "--ngram-prompt-lookup-min": "prompt_lookup_min"},
        ),
        sglang=OnSglang(
            algorithm="NGRAM", drafts_with="n-gram lookup; no drafter model", since="0.5.3", shape="lookup", lookup_windows_until="0.5.23"
        ),
        llama_cpp="ngram-simple",
    ),
    # vLLM's suffix_decoding_* defaults (max_tree_depth 24, factor 1.0, probability 0.1) but for 128 cached outputs,
    # not 10,000: speculab's tree is uncompressed (a node a token and depth, about 3.5 KB a cached output token where
    # ArcticInference's compressed one needs a few bytes); num_speculative_tokens is vLLM's max_tree_depth unless set:
    # here 4, as fast as 8 at batch 1-2 and faster from 4 on (BENCHMARKS.md, "Suffix decoding")
    "suffix": Method(
        proposer=SuffixProposer,
        defaults={
            "num_speculative_tokens": 4,
            "max_tree_depth": 24,
            "max_cached_requests": 128,
            "max_spec_factor": 1.0,
            "min_token_prob": 0.1,
            POLICY: None,
        },
        chain="num_speculative_tokens",
        remembers="max_cached_requests",
        vllm=OnVllm(
            method="suffix",
            settings={
                **CHAIN_VLLM,
                "suffix_decoding_max_tree_depth": "max_tree_depth",
                "suffix_decoding_max_cached_requests": "max_cached_requests",
                "suffix_decoding_max_spec_factor": "max_spec_factor",
                "suffix_decoding_min_token_prob": "min_token_prob",
            },
            drafts_with="suffix trees over the prompt and earlier outputs (ArcticInference's); no drafter model; "
            "num_speculative_tokens = the most a draft may have",
            since="0.12.0",
            since_why="vllm#25784",
        ),
        sglang_missing="SGLang has no such algorithm (its port, sglang#13553, was closed unmerged); launch it on vLLM",
    ),
    "draft": Method(
        proposer=DraftModelProposer,
        defaults={"num_speculative_tokens": 3, "draft_vocab": "auto", POLICY: None, "draft": str(DEFAULT_DRAFT)},
        build=lambda params, loaded, auto: draft_model_options(params, loaded, auto),
        drafter="draft",
        memory_kind="draft",
        auto_draft_vocab=8192,  # the tokens its distillation loss covered (98% of the workload's output tokens)
        chain="num_speculative_tokens",
        vllm=OnVllm(
            method="draft_model",
            settings=CHAIN_VLLM,
            drafts_with="a standalone draft model from a clean HF folder (speculab export --for vllm); "
            "num_speculative_tokens = chain length",
            gap=VersionGap(
                "0.11.0",
                "0.14.0",
                "the V0 engine that ran draft models was removed in 0.11.0 and V1 gained them in 0.14.0 (vllm#24322); "
                "use vLLM < 0.11 or >= 0.14",
            ),
        ),
        sglang=OnSglang(
            algorithm="STANDALONE",
            drafts_with="a standalone draft model (sglang#10090); a clean HF folder (speculab export --for sglang)",
            since="0.5.2",
            shape="chain",
        ),
        llama_cpp="draft-simple",
        recipe="speculab.train.recipes:DraftRecipe",
    ),
    "eagle": Method(
        proposer=EagleProposer,
        defaults={**EAGLE_TREE, **EAGLE_PARAMS, "eagle": str(DEFAULT_EAGLE)},
        build=_eagle_build(eagle3=False),
        drafter="eagle",
        memory_kind="eagle",
        auto_draft_vocab=4096,  # 94% of the workload's baseline output tokens (BENCHMARKS.md)
        chain="num_steps",
        tree=True,
        vllm=OnVllm(
            method="eagle",
            settings=EAGLE_VLLM,
            drafts_with="an EAGLE-1 head in vLLM's layout (speculab export --for vllm: fc bias folded into attention); "
            "num_speculative_tokens = chain length",
            head_at_tp_one=True,
            layout=Layout("EagleLlamaForCausalLM", fold_fc_bias=True),
        ),
        sglang=OnSglang(
            algorithm="EAGLE",
            drafts_with="an EAGLE head; the head folder (speculab export --for sglang)",
            token_map_from="0.4.4",
            adapts=True,
            layout=SGLANG_HEAD,
        ),
        recipe="speculab.train.recipes:EagleRecipe",
    ),
    # eagle's tree and policy: the best of five batch-1 trees for the shipped EAGLE-3 head on held-out prompts
    # (BENCHMARKS.md, "The EAGLE-3 head"), and the two heads then compare like for like; draft_vocab auto keeps 4,096
    # of the head's own 8,192 tokens: as accepted, and faster at batch 1
    "eagle3": Method(
        proposer=Eagle3Proposer,
        defaults={**EAGLE_TREE, **EAGLE_PARAMS, "eagle": str(DEFAULT_EAGLE3)},
        build=_eagle_build(eagle3=True),
        drafter="eagle",
        memory_kind="eagle3",
        auto_draft_vocab=4096,
        chain="num_steps",
        tree=True,
        vllm=OnVllm(
            method="eagle3",
            settings=EAGLE_VLLM,
            drafts_with="an EAGLE-3 head in the published layout; num_speculative_tokens = chain length",
            since="0.8.5",
            layout=EAGLE3_HEAD,
        ),
        sglang=OnSglang(
            algorithm="EAGLE3",
            drafts_with="an EAGLE-3 head; the head folder (speculab export --for sglang)",
            since="0.4.4",
            adapts=True,
            layout=EAGLE3_HEAD,
        ),
        recipe="speculab.train.recipes:Eagle3Recipe",
    ),
}
OPTIONAL = {"draft_vocab"}  # parameters that ``none`` turns off (a policy: ``policy_value``)
# parameters of earlier versions, now named policies: a spec that uses one is told the new spelling
RENAMED = {"batch_budget": "policy=shared:B", "disable_by_batch_size": "policy=plain_above:N"}
PATHS = {m.drafter for m in METHODS.values() if m.drafter}  # parameters naming a drafter folder


@dataclass(frozen=True)
class MethodSpec:
    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name(key=value,...)``, and ``@folder`` when the drafter is not the default one: two different
        settings never share a label."""
        shown = [f"{k}={v}" for k, v in self.params.items() if k not in PATHS and v is not None]
        label = f"{self.name}({','.join(shown)})" if shown else self.name
        key = METHODS[self.name].drafter if self.name in METHODS else None
        if key and self.params.get(key) not in (None, METHODS[self.name].defaults.get(key)):
            label += f"@{Path(self.params[key]).name}"
        return label

    @property
    def text(self) -> str:
        """The spec as ``--method`` takes it (``name:key=value,...``: what differs from the defaults), its policy left
        out: what a tuned policy is kept under."""
        defaults = METHODS[self.name].defaults if self.name in METHODS else {}
        shown = [f"{k}={'none' if v is None else v}" for k, v in self.params.items() if k != POLICY and v != defaults.get(k)]
        return f"{self.name}:{','.join(shown)}" if shown else self.name

    @property
    def method(self) -> Method:
        return METHODS[self.name]


def _value(text: str, default: Any, key: str = "") -> Any:
    if key == POLICY:
        return policy_value(text)
    if key in OPTIONAL and text.lower() in ("", "none"):
        return None
    if key == "draft_vocab":
        return "auto" if text == "auto" else int(text)
    if key in PATHS:
        return text
    if default is None or isinstance(default, int) and not isinstance(default, bool):
        return int(text)
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes")
    if isinstance(default, float):
        return float(text)
    return text


def method(name: str) -> Method:
    """The method called ``name``; an unknown name is a clear error listing the known ones."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def make_proposer(name: str, **options: Any) -> Proposer:
    """The proposer of the method ``name`` from its constructor's options (drafters already loaded); an unknown
    option is the constructor's TypeError."""
    return method(name).proposer(**options)


def parse_method(text: str) -> MethodSpec:
    """``eagle:num_steps=5,topk=8,num_draft_tokens=32`` -> MethodSpec; unknown names and keys are clear errors."""
    name, _, rest = text.partition(":")
    defaults, drafter = method(name).defaults, method(name).drafter
    params = dict(defaults)
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if key in RENAMED and POLICY in params:
            raise ValueError(f"{text!r}: {key} is now a speculation policy, {RENAMED[key]}")
        if not eq or key not in params:
            raise ValueError(f"{text!r}: {name} takes {', '.join(f'{k}=…' for k in params) or 'no parameters'}")
        try:
            params[key] = _value(value, defaults[key], key)
        except ValueError:
            kind = "int, auto or none" if key == "draft_vocab" else type(defaults[key]).__name__ if defaults[key] is not None else "int"
            raise ValueError(f"{text!r}: {key} must be a {kind}") from None
    if drafter and params.get(drafter) is None:
        raise ValueError(f"{name} needs {drafter}=PATH")
    if params.get(POLICY) not in (None, AUTO):
        read_policy(params[POLICY])  # a bad named policy or file is refused now, not when the target has loaded
    return MethodSpec(name, params)


def with_policy(spec: MethodSpec, policy: str | None) -> MethodSpec:
    """``spec`` under a command's ``--policy`` (a named policy, a file, ``auto``, or None/``off``: as it is), for a
    speculative method whose own policy is its default; a method without drafts (baseline) and one that names another
    policy keep theirs. A named policy or file is read now, so a bad one is refused at once (``auto`` is looked up when
    the target is loaded: ``proposer_options``)."""
    policy = None if policy is None else policy_value(policy)
    if policy is None or POLICY not in spec.params or spec.params[POLICY] != spec.method.defaults[POLICY]:
        return spec
    if policy != AUTO:
        read_policy(policy)
    return MethodSpec(spec.name, {**spec.params, POLICY: policy})


def speculation_policy(spec: MethodSpec, loaded) -> SpeculationPolicy | None:
    """The spec's policy: a named one, its file's, ``speculab tune``'s for this machine and target (``auto``), or None."""
    policy = spec.params.get(POLICY)
    if policy is None:
        return None
    if policy == AUTO:
        return tuned_policy(loaded, spec.text)
    return read_policy(policy)


def proposer_options(spec: MethodSpec, loaded) -> dict:
    """The proposer's constructor options (drafters loaded) and, under ``POLICY``, its policy: build once, then
    ``new_proposer`` per run."""
    return proposer_options_of([spec], loaded)[spec.label]


def proposer_options_of(specs: list[MethodSpec], loaded) -> dict[str, dict]:
    """Each spec's ``proposer_options`` by label, a drafter loaded once for the specs that differ only in their policy:
    they share its weights, and so its prompt state in a prompt cache (a proposer's ``prompt_cache_key``)."""
    drafters, options_of = {}, {}
    for spec in specs:
        same = (spec.name, tuple(sorted((k, str(v)) for k, v in spec.params.items() if k != POLICY)))
        if same not in drafters:
            drafters[same] = spec.method.options(spec.params, loaded)
        policy = speculation_policy(spec, loaded)
        options_of[spec.label] = drafters[same] if policy is None else drafters[same] | {POLICY: policy}
    return options_of


def new_proposer(spec: MethodSpec, options: dict):
    """A fresh proposer for one run, under its speculation policy when it has one."""
    options = dict(options)
    policy = options.pop(POLICY, None)
    proposer = make_proposer(spec.name, **options)
    return proposer if policy is None else PolicyProposer(proposer, policy)


def without_policy(spec: MethodSpec) -> MethodSpec:
    """``spec`` drafting all it drafts at every load (what a tuner sweeps under budgets of its own)."""
    return spec if POLICY not in spec.params else MethodSpec(spec.name, {**spec.params, POLICY: None})


def as_chain(spec: MethodSpec, k: int) -> MethodSpec:
    """``spec`` drafting chains of ``k`` tokens and no policy, as an engine that verifies chains runs it (k = 0:
    plain decoding)."""
    if k == 0:
        return parse_method("baseline")
    m = spec.method
    shape = {"num_steps": k, "topk": 1, "num_draft_tokens": k + 1} if m.tree else {m.chain: k}
    return MethodSpec(spec.name, {**spec.params, **shape, POLICY: None})


def chain_length(spec: MethodSpec) -> int:
    """The chain an engine that verifies chains drafts for ``spec``: a tree's depth (num_steps) as its tokens."""
    return int(spec.params[spec.method.chain])


def draft_nodes(spec: MethodSpec) -> int:
    """The most draft nodes ``spec`` drafts a request, as its proposer counts them (``max_draft_tokens``): a tree's
    nodes (the root not counted; no more than its steps and branches can grow), a chain's tokens."""
    if not spec.method.tree:
        return chain_length(spec)
    steps, topk = int(spec.params["num_steps"]), int(spec.params["topk"])
    return min(int(spec.params["num_draft_tokens"]) - 1, topk + (steps - 1) * topk * topk)


def shipped_drafter_key(spec: MethodSpec) -> str | None:
    """The drafter parameter still at its default (the embedded model's shipped drafter), else None: a command
    given another target must then be told to pass its own drafter."""
    key = spec.method.drafter
    return key if key and spec.params[key] == spec.method.defaults.get(key) else None


def require_own_drafter(spec: MethodSpec, option: str) -> None:
    """For a target other than the embedded model: refuse a spec still on the shipped drafter, saying how this
    command takes one (``option``, with ``{key}`` for the drafter parameter: "--{key} PATH", "{key}=PATH")."""
    if key := shipped_drafter_key(spec):
        raise ValueError(f"--method {spec.name} needs {option.format(key=key)}: the shipped drafters are for the embedded model")


def drafter_path(spec: MethodSpec) -> Path | None:
    key = spec.method.drafter
    return Path(spec.params[key]) if key else None


def spec_draft_vocab_size(spec: MethodSpec) -> int | None:
    """The tokens the spec's drafter drafts over (``draft_vocab``, ``auto`` resolved); None: its whole vocabulary."""
    path = drafter_path(spec)
    return None if path is None or "draft_vocab" not in spec.params else draft_vocab_size(spec.params, path, spec.method.auto_draft_vocab)
