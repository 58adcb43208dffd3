"""Decoding methods: ``name[:key=value,...]`` specs, their one set of defaults, and their drafters.

The one place where a method's settings live: ``speculab generate``, ``speculab bench``,
``speculab serve`` and the trainers' evaluations all build their proposers from a
:class:`MethodSpec` parsed here, so a label in BENCHMARKS.md names exactly what any
command runs.

Knows: each method's proposer class, parameters and defaults (the shipped drafters of the
embedded model are the default ``draft``, ``eagle`` and ``eagle3`` checkpoints), how to
parse a spec from the command line, how to load its drafter and build its proposer, and
which drafter kind its memory estimate needs. Adding a method is one entry in ``METHODS``
(its proposer's file in ``speculative/`` aside); nothing branches on names. The fixed-tree
EAGLE proposer (``speculative.eagle.StaticTreeEagleProposer``) is a Python-API option, built
by its class, not a method: it has no defaults to keep here and no engine to launch it on.

Does not know: timing, HTTP, or memory arithmetic (``models/memory.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import speculab.models.eagle3_head as e3
import speculab.models.eagle_head as e2
from speculab.models.draft_vocab import RANKING_FILE, load_token_ranking
from speculab.models.loading import load_model
from speculab.models.tokenizer import Tokenizer
from speculab.runtime import DTYPES
from speculab.speculative.draft_model import DraftModelProposer
from speculab.speculative.eagle import Eagle3Proposer, EagleProposer
from speculab.speculative.ngram import NgramProposer
from speculab.speculative.policy import AUTO, PolicyProposer, SpeculationPolicy
from speculab.speculative.policy_store import tuned_policy
from speculab.speculative.proposer import Proposer
from speculab.speculative.suffix import SuffixProposer

ASSETS = Path(__file__).resolve().parent / "assets"
DEFAULT_DRAFT = ASSETS / "smollm2-135m-draft"
DEFAULT_EAGLE = ASSETS / "smollm2-135m-eagle"
DEFAULT_EAGLE3 = ASSETS / "smollm2-135m-eagle3"


@dataclass(frozen=True)
class MethodSpec:
    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name(key=value,...)``, and ``@folder`` when the drafter is not the default one: two different
        settings never share a label."""
        shown = [f"{k}={v}" for k, v in self.params.items() if k not in ("draft", "eagle") and v is not None]
        label = f"{self.name}({','.join(shown)})" if shown else self.name
        key = METHODS[self.name].drafter if self.name in METHODS else None
        if key and self.params.get(key) not in (None, METHODS[self.name].defaults.get(key)):
            label += f"@{Path(self.params[key]).name}"
        return label

    @property
    def text(self) -> str:
        """The spec as ``--method`` takes it (``name:key=value,...``: what differs from the defaults), its policy left out."""
        defaults = METHODS[self.name].defaults if self.name in METHODS else {}
        shown = [f"{k}={'none' if v is None else v}" for k, v in self.params.items() if k != POLICY and v != defaults.get(k)]
        return f"{self.name}:{','.join(shown)}" if shown else self.name


def _as_given(params: dict, loaded) -> dict:
    return dict(params)


@dataclass(frozen=True, kw_only=True)
class Method:
    proposer: Callable[..., Proposer]  # its class, whose ``name`` is the method's
    defaults: dict[str, Any] = field(default_factory=dict)  # every parameter the spec takes, with its default
    build: Callable[[dict, Any], dict] = _as_given  # (params, loaded target) -> the proposer's options
    drafter: str | None = None  # the params key naming the drafter's folder
    memory_kind: str | None = None  # drafter kind for bench.memory.estimate


def load_draft_model(path: str | Path, loaded):
    """A draft model for the loaded target, in its dtype, KV cache dtype and device; it must share the target's tokenizer."""

    if Tokenizer(path)._tok.get_vocab() != loaded.tokenizer._tok.get_vocab():
        raise ValueError(f"{path}: the draft model's tokenizer differs from the target's; they must share one")
    model = load_model(path, DTYPES[loaded.dtype], loaded.device)
    model.kv_dtype = loaded.model.kv_dtype  # one KV dtype for both caches (the memory estimate's assumption)
    return model


def reduced_vocabulary(folder: Path, loaded, size: int | None) -> dict:
    """The ``draft_vocab`` option (FR-Spec): the drafter folder's ``size`` most frequent tokens; {} for None."""

    return {} if size is None else {"draft_vocab": load_token_ranking(folder, loaded.model.config.vocab_size)[:size]}


def _draft_options(p: dict, loaded) -> dict:
    folder = _existing(p["draft"], "draft")
    return {
        "model": load_draft_model(folder, loaded),
        "num_speculative_tokens": p["num_speculative_tokens"],
        **reduced_vocabulary(folder, loaded, draft_vocab_size("draft", p, folder)),
    }


def _eagle_options(loader_name: str) -> Callable[[dict, Any], dict]:
    def build(p: dict, loaded) -> dict:

        folder = _existing(p["eagle"], "eagle")
        reduced = reduced_vocabulary(folder, loaded, draft_vocab_size(loader_name, p, folder))
        if loader_name == "eagle3":  # its own vocabulary is cut as it loads: the proposer gets no draft_vocab
            head, reduced = e3.load_eagle3_head(folder, loaded.model, **reduced), {}
        else:
            head = e2.load_eagle_head(folder, loaded.model)
        options = {
            "head": head,
            "target": loaded.model,
            "num_steps": p["num_steps"],
            "topk": p["topk"],
            "num_draft_tokens": p["num_draft_tokens"],
        }
        return options | reduced

    return build


def draft_vocab_size(method: str, params: dict, folder: Path) -> int | None:
    """Tokens an EAGLE head or a draft model drafts over: ``auto`` is the method's AUTO_DRAFT_VOCAB where the
    drafter ships a token ranking and the whole vocabulary (an EAGLE-3 head's own; None) elsewhere."""

    size = params.get("draft_vocab")
    if size == "auto":
        return AUTO_DRAFT_VOCAB[method] if (Path(folder) / RANKING_FILE).exists() else None
    return size


def _existing(path: str | Path, key: str) -> Path:
    path = Path(path)
    if not (path / "config.json").exists():
        raise ValueError(
            f"{key}={path}: no checkpoint there (config.json missing); "
            f"train one with `speculab train {'eagle' if 'eagle' in key else 'draft'}` or pass {key}=PATH"
        )
    return path


# draft_vocab=auto, tokens kept: an EAGLE head's 4,096 cover 94% of the workload's baseline output tokens
# (BENCHMARKS.md); a draft model's 8,192 are the tokens its distillation loss covered (98%); an EAGLE-3 head's
# 4,096 of its own 8,192 drafted as well and faster at batch 1 ("The EAGLE-3 head").
AUTO_DRAFT_VOCAB = {"eagle": 4096, "draft": 8192, "eagle3": 4096}
BUDGET = "batch_budget"  # EAGLE's: about this many draft nodes a step, shared by the batch
LIMIT = "disable_by_batch_size"  # every speculative method's: plain decoding above this batch size
POLICY = "policy"  # every speculative method's: a policy file or auto capping each request's draft (speculative/policy.py)
# parameters kept under their own names (recorded labels carry them) that each preset a speculation policy's table
PRESETS = {BUDGET: SpeculationPolicy.batch_budget, LIMIT: SpeculationPolicy.disable_by_batch_size}
BATCH_SETTINGS = (*PRESETS, POLICY)  # what drafts less at larger batches: one speculation policy (``new_proposer``)
# batch_budget 4: the whole 3-node tree at batch 1, 2 nodes a request at batch 2, one from batch 3 on, where a
# verify step is compute-bound and only the first draft token pays (BENCHMARKS.md, "The batch budget")
EAGLE_TREE = {"num_steps": 3, "topk": 2, "num_draft_tokens": 4, BUDGET: 4}

METHODS: dict[str, Method] = {
    "baseline": Method(proposer=Proposer),
    "ngram": Method(
        proposer=NgramProposer,
        defaults={"num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5, LIMIT: None, POLICY: None},
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
            LIMIT: None,
            POLICY: None,
        },
    ),
    "draft": Method(
        proposer=DraftModelProposer,
        defaults={"num_speculative_tokens": 3, "draft_vocab": "auto", LIMIT: None, POLICY: None, "draft": str(DEFAULT_DRAFT)},
        build=_draft_options,
        drafter="draft",
        memory_kind="draft",
    ),
    "eagle": Method(
        proposer=EagleProposer,
        defaults={**EAGLE_TREE, "draft_vocab": "auto", LIMIT: None, POLICY: None, "eagle": str(DEFAULT_EAGLE)},
        build=_eagle_options("eagle"),
        drafter="eagle",
        memory_kind="eagle",
    ),
    # eagle's tree and budget: the best of five batch-1 trees for the shipped EAGLE-3 head on held-out prompts
    # (BENCHMARKS.md, "The EAGLE-3 head"), and the two heads then compare like for like
    "eagle3": Method(
        proposer=Eagle3Proposer,
        defaults={**EAGLE_TREE, "draft_vocab": "auto", LIMIT: None, POLICY: None, "eagle": str(DEFAULT_EAGLE3)},
        build=_eagle_options("eagle3"),
        drafter="eagle",
        memory_kind="eagle3",
    ),
}


OPTIONAL = {BUDGET, "draft_vocab", LIMIT, POLICY}  # parameters that ``none`` turns off
PATHS = {m.drafter for m in METHODS.values() if m.drafter}  # parameters naming a drafter folder


def _value(text: str, default: Any, key: str = "") -> Any:
    if key in OPTIONAL and text.lower() in ("", "none") or key == POLICY and text.lower() == "off":
        return None
    if key == "draft_vocab":
        return "auto" if text == "auto" else int(text)
    if key in PATHS or key == POLICY:
        return text
    if default is None:
        return int(text)
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes")
    if isinstance(default, int):
        return int(text)
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
        if not eq or key not in params:
            raise ValueError(f"{text!r}: {name} takes {', '.join(f'{k}=…' for k in params) or 'no parameters'}")
        try:
            params[key] = _value(value, defaults[key], key)
        except ValueError:
            kind = "int, auto or none" if key == "draft_vocab" else type(defaults[key]).__name__ if defaults[key] is not None else "int"
            raise ValueError(f"{text!r}: {key} must be a {kind}") from None
    if drafter and params.get(drafter) is None:
        raise ValueError(f"{name} needs {drafter}=PATH")
    return MethodSpec(name, params)


def with_policy(spec: MethodSpec, policy: str | None) -> MethodSpec:
    """``spec`` under a command's ``--policy`` (a file, ``auto``, or None/``off``: as it is). A method without drafts
    (baseline) and one that names its own policy keep theirs; a file is read now, so a bad one is refused at once
    (``auto`` is looked up when the target is loaded: ``proposer_options``)."""
    if policy is None or policy.lower() == "off" or POLICY not in spec.params or spec.params[POLICY] is not None:
        return spec
    if policy != AUTO:
        SpeculationPolicy.from_file(policy)
    return MethodSpec(spec.name, {**spec.params, POLICY: policy})


def speculation_policy(spec: MethodSpec, loaded) -> SpeculationPolicy | None:
    """The spec's policy: its file's, ``speculab tune``'s for this machine and target (``auto``), or None."""
    policy = spec.params.get(POLICY)
    if policy is None:
        return None
    if policy == AUTO:
        return tuned_policy(loaded, spec.text)
    return SpeculationPolicy.from_file(policy)


def proposer_options(spec: MethodSpec, loaded) -> dict:
    """The proposer's constructor options (drafters loaded) and, under ``POLICY``, its policy: build once, then
    ``new_proposer`` per run."""
    options = METHODS[spec.name].build({k: v for k, v in spec.params.items() if k not in BATCH_SETTINGS}, loaded)
    policy = speculation_policy(spec, loaded)
    return options if policy is None else options | {POLICY: policy}


def new_proposer(spec: MethodSpec, options: dict):
    """A fresh proposer for one run, under its speculation policy when it has one: the options' policy (a file or
    auto) capped by the spec's presets (``batch_budget``, ``disable_by_batch_size``), all one batch table."""

    options = dict(options)
    policy = options.pop(POLICY, None)
    for key, preset in PRESETS.items():
        if spec.params.get(key) is not None:
            policy = preset(spec.params[key]) if policy is None else policy.capped_by(preset(spec.params[key]))
    proposer = make_proposer(spec.name, **options)
    return proposer if policy is None else PolicyProposer(proposer, policy)


def drafter_key(spec: MethodSpec) -> str | None:
    """The parameter naming the spec's drafter folder (``draft`` or ``eagle``), None without a drafter."""
    return METHODS[spec.name].drafter


def shipped_drafter_key(spec: MethodSpec) -> str | None:
    """The drafter parameter still at its default (the embedded model's shipped drafter), else None: a command
    given another target must then be told to pass its own drafter."""
    key = drafter_key(spec)
    return key if key and spec.params[key] == METHODS[spec.name].defaults.get(key) else None


def require_own_drafter(spec: MethodSpec, option: str) -> None:
    """For a target other than the embedded model: refuse a spec still on the shipped drafter, saying how this
    command takes one (``option``, with ``{key}`` for the drafter parameter: "--{key} PATH", "{key}=PATH")."""
    if key := shipped_drafter_key(spec):
        raise ValueError(f"--method {spec.name} needs {option.format(key=key)}: the shipped drafters are for the embedded model")


def drafter_path(spec: MethodSpec) -> Path | None:
    key = drafter_key(spec)
    return Path(spec.params[key]) if key else None


def add_policy_flag(parser) -> None:
    """``--policy FILE|off``, as generate, bench and serve take it (``with_policy`` applies it)."""
    parser.add_argument(
        "--policy",
        default=None,
        help="a speculation policy file (JSON: draft nodes per request by batch size, and a floor on each request's "
        "acceptance; README), or auto (what `speculab tune` chose for this machine, target and method), for every "
        "speculative method that names none; off (the default): none",
    )
