"""The contexts a tune measures, their prompts, and the one policy their choices make.

``speculab tune --contexts`` takes what ``speculab bench --contexts`` takes (``bench/contexts.py``: ``workload``, the
prompts as they are; a number of tokens, ``4096`` or ``4k``; ``max``; any of them with its own batch sizes after ``@``,
``4k@1,16``), and builds a context's prompts as the benchmark does: the workload's requests after whole repository
files of their language (``Lengthener``). At a long context it takes one request a language (python, typescript, sql:
an agentic conversation is in one of them), repeated to fill each batch: a repeat is a prompt-cache hit, while a 4k
prompt's prefill took 20 s on a 2-core EPYC, and that tune runs inside ``make bench``. A drafter that learns across requests (suffix decoding's shared tree) would draft a repeat from
its first output, so it keeps distinct prompts at every context (and pays their prefill).

A context's budgets hold from a threshold: the midpoint, rounded down, between its median prompt tokens and those of the
next shorter measured context (0 for the shortest), so a load takes the nearest measured context's budgets, each
context's own by batch size (``SpeculationPolicy.by_load``). A batch size below a context's smallest measured one takes
the shorter contexts' budget there.

Knows: the contexts' values and prompts, their thresholds, and how their choices become one policy. Does not know: how
a context is measured (``measure.py``) or chosen (``cost_model.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from speculab.bench.contexts import AS_IS, Lengthener, context_key, parse_context_spec, resolve_contexts_each
from speculab.bench.workload import WorkloadItem
from speculab.policy.table import SpeculationPolicy

WORKLOAD_ONLY = ((None, None),)  # what a tune measures without --contexts: the workload's own, at --batch-sizes


@dataclass(frozen=True)
class TuneContext:
    """One context a tune measures: as asked, resolved, its batch sizes and its prompts."""

    asked: int | str | None  # None (the workload's own), "max" or tokens, as the --contexts value gave it
    context_len: int | None  # resolved: None (the prompts as they are) or tokens
    batch_sizes: tuple[int, ...]
    prompts: list[list[int]]  # target token ids
    domains: list[str]

    @property
    def key(self) -> str:
        """Its name in the record and the policy's ``tuned_contexts`` (``context_key`` of the value as asked, so that a
        later ``max`` finds it)."""
        return context_key(self.asked)

    @property
    def median_tokens(self) -> int:
        lengths = sorted(map(len, self.prompts))
        return lengths[len(lengths) // 2]

    def label(self) -> str:
        return f"{self.key} ({self.median_tokens} tokens)"


def parse_contexts(values: list[str] | None) -> tuple[tuple[int | str | None, tuple[int, ...] | None], ...]:
    """``--contexts`` values as (context, its own batch sizes or None); each context once, its first value kept.
    A bad value is a ValueError naming ``--contexts``."""
    if not values:
        return WORKLOAD_ONLY
    found: dict[str, tuple] = {}
    for value in values:
        context, sizes = parse_context_spec(value)
        found.setdefault(context_key(context), (context, sizes))
    return tuple(found.values())


def one_per_language(items: list[WorkloadItem]) -> list[WorkloadItem]:
    """The first request of each language (an agentic conversation's, else its domain), in order."""
    first: dict[str, WorkloadItem] = {}
    for item in items:
        first.setdefault(item.language or item.domain, item)
    return list(first.values())


def build_contexts(asked, batch_sizes, loaded, items: list[WorkloadItem], room: int, distinct: bool) -> list[TuneContext]:
    """Each asked (context, batch sizes or None: ``batch_sizes``) with its prompts for ``loaded`` (runtime.LoadedModel):
    ``items`` at the workload's own context, and at a longer one the first of each language (all of them where
    ``distinct``: a drafter that learns across requests); ``room``: the positions a request needs after its prompt. Two
    values of one length are measured once; two contexts whose prompts have one median length are refused (one
    threshold cannot part them)."""
    each = resolve_contexts_each([c for c, _ in asked], loaded.model.config.max_position_embeddings, room)
    lengthen = Lengthener.from_pool(loaded.tokenizer) if any(c is not None for c in each) else None
    contexts: dict[int | None, TuneContext] = {}
    for (context, sizes), tokens in zip(asked, each):
        if tokens in contexts:
            continue
        picked = items if tokens is None or distinct else one_per_language(items)
        at = [lengthen.at(i, tokens) for i in picked] if tokens is not None else picked
        ids = [loaded.tokenizer.encode_chat(i.message_dicts()) for i in at]
        contexts[tokens] = TuneContext(context, tokens, tuple(sizes or batch_sizes), ids, [i.domain for i in at])
    found = list(contexts.values())
    medians = [c.median_tokens for c in found]
    if len(set(medians)) < len(medians):
        raise ValueError(f"--contexts: {', '.join(c.label() for c in found)}: two contexts give prompts of one median length")
    return found


def thresholds(contexts: list[TuneContext]) -> dict[str, int]:
    """Each context's threshold, by key: 0 for the shortest, else the midpoint between its median prompt tokens and the
    next shorter context's."""
    order = sorted(contexts, key=lambda c: c.median_tokens)
    return {c.key: 0 if i == 0 else (order[i - 1].median_tokens + c.median_tokens) // 2 for i, c in enumerate(order)}


def tuned_contexts(contexts: list[TuneContext]) -> tuple[str, ...]:
    """What the policy says it was tuned at: nothing for the workload's own alone (the file as it was before a tune took
    contexts)."""
    keys = tuple(c.key for c in contexts)
    return () if keys == (AS_IS,) else keys


def context_policy(budgets: dict[str, dict[int, int]], starts: dict[str, int], tuned: tuple[str, ...]) -> SpeculationPolicy:
    """One policy from each context's budgets by batch size (keyed as ``starts``, each context's threshold): every
    context's own budgets at every measured batch size from its threshold up, its budget at a batch size between its
    own measured ones the one below's (as ``by_batch_size``)."""
    sizes = sorted({b for table in budgets.values() for b in table})
    grid = {}
    for key, table in budgets.items():
        for b in sizes:
            below = [m for m in table if m <= b]
            if below:  # a batch size below the context's smallest takes the shorter contexts' rules there
                grid[(b, starts[key])] = table[max(below)]
    return SpeculationPolicy.by_load(grid, tuned_contexts=tuned)


# what a context's part of a tune's record holds; a tune of the workload's own context alone keeps them at its top level
CONTEXT_PARTS = ("batch_sizes", "num_prompts", "cost_model", "chosen", "corrected", "skipped_batch_sizes", "check")


def context_parts(record: dict) -> dict[str, dict]:
    """A tune's record by context key: its ``contexts``, or for the workload's own alone the record's top level."""
    return record.get("contexts") or {AS_IS: {k: record[k] for k in CONTEXT_PARTS if k in record}}
