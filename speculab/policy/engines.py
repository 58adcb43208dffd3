"""A speculation policy in vLLM's and SGLang's settings, and what each cannot express: the one translation, used by
``speculab launch`` (which refuses to launch what it cannot express), ``speculab tune`` (which prints the nearest
settings beside what they lose) and ``speculab bench --engine`` (which launches through ``launch``).

Knows (read in vLLM's ``vllm/config/speculative.py`` and ``v1/spec_decode/dynamic/utils.py`` as ``make vllm`` installs
them, 0.32.0, and SGLang's ``server_args.py`` and ``speculative/adaptive_spec_params.py``):
- vLLM drafts chains, and a chain's nodes are its tokens: a draft budget of n nodes is vLLM's k = n
  (``num_speculative_tokens``), for a tree method too (its n nodes become a chain as long): ``chain_tokens``.
- vLLM V1 takes ``num_speculative_tokens_per_batch_size`` in ``--speculative-config`` (from 0.24, vllm#32374):
  inclusive batch-size ranges ``[[first, last, k], ...]`` from 1, k >= 0 and at most ``num_speculative_tokens``, the
  last k carried past the last range. It keys on nothing else: a budget keyed on context length (what
  ``speculab tune --contexts`` writes) is beyond it, said as such, its short-context rules kept (vLLM's open request
  to key speculation on sequence length is not merged).
- SGLang adapts only EAGLE/EAGLE3 chains (topk 1): ``--speculative-adaptive`` with ``--speculative-adaptive-config``, a
  JSON file of ``{"smallest batch size": {"candidate_steps": [steps]}}`` (sglang#21599, #24055; first in the recorded
  parsers at 0.5.23); its other algorithms draft a fixed ``--speculative-num-steps``.
- Neither limits one request by its own acceptance (``min_acceptance``).
Does not know: methods' own engine settings or versions' flags (``launch/``): it says the policy's part.
"""

from __future__ import annotations

from dataclasses import dataclass

from speculab.policy.table import Load, SpeculationPolicy

PER_REQUEST = "a floor on each request's own acceptance (min_acceptance)"
BY_CONTEXT = "a budget keyed on context length ({engine} keys speculation on batch size only; the short-context rules are used)"


def chain_tokens(draft_nodes: int) -> int:
    """vLLM's k for a draft budget: vLLM drafts chains, and a chain of k tokens is k draft nodes."""
    return draft_nodes


def per_batch_size(policy: SpeculationPolicy, nodes: int) -> list[tuple[int, int]]:
    """(smallest batch size, draft nodes) from batch size 1 for a method that drafts ``nodes`` without a budget, equal
    neighbours merged, at context length 0 (no budget: all the method drafts)."""
    sizes = sorted({1, *(r.batch_size for r in policy.rules)})
    out: list[tuple[int, int]] = []
    for b in sizes:
        budget = policy.draft_budget(Load(b))
        kept = nodes if budget is None else min(nodes, budget)
        if not out or out[-1][1] != kept:
            out.append((b, kept))
    return out


def _cannot(policy: SpeculationPolicy, engine: str) -> list[str]:
    cannot = []
    if policy.min_acceptance > 0:
        cannot.append(PER_REQUEST)
    if policy.keys_on_context:
        cannot.append(BY_CONTEXT.format(engine=engine))
    return cannot


@dataclass(frozen=True)
class VllmBudget:
    """The policy's part of vLLM's ``--speculative-config``."""

    config: dict  # num_speculative_tokens (the most) and, where the budget varies, num_speculative_tokens_per_batch_size
    plain: bool  # plain decoding at every batch size: no --speculative-config at all
    cannot: tuple[str, ...]  # what of the policy vLLM cannot express
    notes: tuple[str, ...] = ()  # what it expresses, but not as the policy meant it


def vllm_budget(policy: SpeculationPolicy, chain: int) -> VllmBudget:
    """``chain``: the chain the method drafts without a budget (vLLM's k at most)."""
    table = [(b, chain_tokens(n)) for b, n in per_batch_size(policy, chain)]
    most = max(k for _, k in table)
    config = {"num_speculative_tokens": most}
    if len(table) > 1:
        ends = [b - 1 for b, _ in table[1:]] + [table[-1][0]]
        config["num_speculative_tokens_per_batch_size"] = [[b, end, k] for (b, k), end in zip(table, ends)]
    zero = [b for b, k in table if k == 0]
    notes = (
        (
            f"k = 0 from batch {zero[0]}: inside a speculative config vLLM keeps its speculative step's costs (19-29% below "
            'plain decoding on vLLM-CPU, BENCHMARKS.md "`speculab tune --engine vllm`")',
        )
        if zero and most
        else ()
    )
    return VllmBudget(config, most == 0, tuple(_cannot(policy, "vLLM")), notes)


@dataclass(frozen=True)
class SglangBudget:
    """The policy's part of SGLang's flags: a chain of ``steps`` (topk 1), adapted by batch size where it can be."""

    steps: int  # the most draft nodes at any batch size (a chain's --speculative-num-steps)
    adaptive: dict | None  # --speculative-adaptive-config's content, or None: the same steps at every batch size
    plain: bool  # plain decoding at every batch size: no --speculative-algorithm at all
    cannot: tuple[str, ...]


def sglang_budget(policy: SpeculationPolicy, nodes: int, *, cannot_adapt: str | None) -> SglangBudget:
    """``nodes``: what the method drafts without a budget; ``cannot_adapt``: why this algorithm (or version) has no
    ``--speculative-adaptive``; None: it has."""
    table = per_batch_size(policy, nodes)
    most = max(n for _, n in table)
    cannot = _cannot(policy, "SGLang")
    adaptive = None
    if len(table) > 1 and most:
        if cannot_adapt is None:
            adaptive = {str(b): {"candidate_steps": [n]} for b, n in table}
        else:
            cannot.append(f"a budget that changes with the batch size ({cannot_adapt}; the nearest: {most} at every batch size)")
    return SglangBudget(most, adaptive, most == 0, tuple(cannot))
