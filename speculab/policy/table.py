"""A speculation policy: each load's draft budget, a floor on each request's own acceptance, and its file format.

A verify's extra tokens are nearly free while a step is memory-bound (small batches, long contexts) and cost their
full price once it is compute-bound, and a request whose drafts keep being rejected pays for them at any load. So a
policy says, for a ``Load`` (the running batch's size, the request's context length), the request's *draft budget*:
the most draft nodes it may have in the step (0: decode plainly; None: no budget, the method drafts what it drafts).
And it shrinks a request's budget to ``probe_nodes`` while its own acceptance over its last ``window`` drafted steps
is below ``min_acceptance``.

The budgets are rules, each holding from a batch size and a context length up: a load takes the last rule, in
(batch size, context length) order, whose batch size and context length it reaches. Below every rule: no budget.
A tuner writes its choices as a grid of (batch size, context length) points, each holding from there up
(``by_load``: the fewest rules that do so), and says which contexts it measured (``tuned_contexts``).

A policy is named in a method's spec as ``policy=``: a file (JSON, ``to_dict``), ``auto`` (what ``speculab tune``
measured on this machine: ``store.py``), ``off``, or a named policy:
- ``shared:B``: about B draft nodes a step shared by the batch, ``B // batch size`` a request and at least one;
- ``plain_above:N``: no budget up to N running requests, plain decoding above (vLLM v0's
  ``speculative_disable_by_batch_size``).

Knows: loads, budgets, the file, how a ``policy=`` value is read and the ``--policy`` flag. Does not know: costs (a
tuner writes the rules), how a proposer drafts under a budget (``speculative/policy_proposer.py``), or engines
(``engines.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

AUTO = "auto"  # policy=auto: what `speculab tune` chose for this machine, target and method
OFF = "off"
KEYS = ("draft_budget", "min_acceptance", "window", "probe_nodes", "tuned_contexts")


@dataclass(frozen=True)
class Load:
    """What a draft budget is keyed on."""

    batch_size: int  # requests running in the step
    context_len: int = 0  # tokens of the request's context: its prompt and output so far


@dataclass(frozen=True, order=True)
class BudgetRule:
    """From ``batch_size`` running requests and ``context_len`` tokens of context up: ``draft_nodes`` a request."""

    batch_size: int
    context_len: int
    draft_nodes: int


@dataclass(frozen=True)
class SpeculationPolicy:
    rules: tuple[BudgetRule, ...] = ()  # sorted; see the module docstring for which rule a load takes
    min_acceptance: float = 0.0  # accepted / drafted nodes over a request's last `window` drafted steps
    window: int = 8
    probe_nodes: int = 1  # a request below min_acceptance keeps drafting this many, so it can recover
    # the contexts `speculab tune` measured it at (bench/contexts.context_key: "workload", "4096", "max"); () the
    # workload's own alone. It says where the rules come from, not what they do: policies that differ only in it are equal
    tuned_contexts: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        keys = [(r.batch_size, r.context_len) for r in self.rules]
        if list(self.rules) != sorted(self.rules) or len(set(keys)) != len(keys):
            raise ValueError(f"draft_budget: rules must be distinct and sorted by batch size, then context length: {keys}")
        if any(r.batch_size < 1 or r.context_len < 0 or r.draft_nodes < 0 for r in self.rules):
            raise ValueError("draft_budget: batch_size must be >= 1, context_len and draft_nodes >= 0")
        if not 0.0 <= self.min_acceptance <= 1.0:
            raise ValueError(f"min_acceptance must be in [0, 1], got {self.min_acceptance}")
        if self.window < 1 or self.probe_nodes < 0:
            raise ValueError("window must be >= 1 and probe_nodes >= 0")

    def draft_budget(self, load: Load) -> int | None:
        """The most draft nodes a request may have at this load; None: no budget."""
        budget = None
        for rule in self.rules:
            if load.batch_size >= rule.batch_size and load.context_len >= rule.context_len:
                budget = rule.draft_nodes
        return budget

    @property
    def keys_on_context(self) -> bool:
        return any(r.context_len for r in self.rules)

    @classmethod
    def by_batch_size(cls, budgets: dict[int, int], **floor) -> SpeculationPolicy:
        """Each batch size's budget, holding from it up to the next one given (a tuner's choice); equal neighbours
        merge. ``floor``: min_acceptance, window, probe_nodes."""
        rules: list[BudgetRule] = []
        for batch_size, nodes in sorted(budgets.items()):
            if not rules or rules[-1].draft_nodes != nodes:
                rules.append(BudgetRule(batch_size, 0, nodes))
        return cls(tuple(rules), **floor)

    @classmethod
    def by_load(cls, budgets: dict[tuple[int, int], int], **floor) -> SpeculationPolicy:
        """The fewest rules that give every load the budget a rule at each of ``budgets``' (batch size, context
        length) points would give it (a tuner's grid: each measured context's budgets from its threshold up). Batch
        size by batch size, a rule is written from the first context length where the rules so far give another
        budget, then wherever the budget changes: a load that reaches none of its batch size's rules takes the rules
        of the smaller batch sizes, which already give it its budget. ``floor``: min_acceptance, window, probe_nodes,
        tuned_contexts."""
        full = cls(tuple(BudgetRule(b, c, n) for (b, c), n in sorted(budgets.items())))
        lengths = sorted({c for _, c in budgets})
        rules: list[BudgetRule] = []
        for batch_size in sorted({b for b, _ in budgets}):
            wanted = [full.draft_budget(Load(batch_size, c)) for c in lengths]
            so_far = cls(tuple(rules))  # every rule so far is at a smaller batch size
            had = [so_far.draft_budget(Load(batch_size, c)) for c in lengths]
            start = next((i for i, (w, h) in enumerate(zip(wanted, had)) if w != h), None)
            if start is None:
                continue
            # from `start` on every context length has a budget (a grid point below it reaches every longer one)
            rules += [
                BudgetRule(batch_size, lengths[i], wanted[i])
                for i in range(start, len(lengths))
                if i == start or wanted[i] != wanted[i - 1]
            ]
        return cls(tuple(rules), **floor)

    @classmethod
    def shared(cls, nodes_per_step: int) -> SpeculationPolicy:
        """``shared:B``: ``B // batch size`` nodes a request, at least one. An EAGLE tree so budgeted narrows towards a
        short chain at batch sizes where a verify's extra tokens are no longer free (``EagleProposer.tree_shape``)."""
        if nodes_per_step < 1:
            raise ValueError("shared:B: B must be at least 1")
        return cls.by_batch_size({b: max(1, nodes_per_step // b) for b in range(1, nodes_per_step + 1)})

    @classmethod
    def plain_above(cls, batch_size: int) -> SpeculationPolicy:
        """``plain_above:N``: speculation while at most N requests run, plain decoding above (the benchmark's
        break-even batch size says where to set it)."""
        if batch_size < 1:
            raise ValueError("plain_above:N: N must be at least 1")
        return cls((BudgetRule(batch_size + 1, 0, 0),))

    def to_dict(self) -> dict:
        rules = [{"batch_size": r.batch_size, "draft_nodes": r.draft_nodes} | _context(r) for r in self.rules]
        tuned = {"tuned_contexts": list(self.tuned_contexts)} if self.tuned_contexts else {}
        return {
            "draft_budget": rules,
            "min_acceptance": self.min_acceptance,
            "window": self.window,
            "probe_nodes": self.probe_nodes,
        } | tuned

    @classmethod
    def from_dict(cls, raw: dict) -> SpeculationPolicy:
        """The file's object; ``by_batch_size`` ({"batch size": nodes}) is read as it was written before rules had a
        context length (tuned files and results of earlier versions)."""
        raw = dict(raw)
        if "by_batch_size" in raw and "draft_budget" not in raw:
            raw["draft_budget"] = _legacy_rules(raw.pop("by_batch_size"))
        unknown = set(raw) - set(KEYS)
        if unknown:
            raise ValueError(f"unknown policy keys: {', '.join(sorted(unknown))}")
        rules = tuple(sorted(_rule(r) for r in _rule_list(raw.get("draft_budget", []))))
        floor = {
            key: _number(raw, key, kind) for key, kind in (("min_acceptance", float), ("window", int), ("probe_nodes", int)) if key in raw
        }
        return cls(rules, **floor, tuned_contexts=_contexts(raw.get("tuned_contexts", [])))

    @classmethod
    def from_file(cls, path: str | Path) -> SpeculationPolicy:
        try:
            raw = json.loads(Path(path).read_text())
            if not isinstance(raw, dict):
                raise ValueError("a policy file holds one JSON object")
            return cls.from_dict(raw)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None


NAMED = {"shared": SpeculationPolicy.shared, "plain_above": SpeculationPolicy.plain_above}
NUMBER_OF = {"shared": "B", "plain_above": "N"}  # as the docs write them: shared:B, plain_above:N


def policy_value(text: str) -> str | None:
    """A ``policy=`` value as given: None for ``off`` or ``none``, ``auto`` in any case, else as written."""
    low = text.strip().lower()
    return None if low in ("", OFF, "none") else AUTO if low == AUTO else text


def named_policy(text: str) -> SpeculationPolicy | None:
    """``shared:4`` -> its policy; None when ``text`` names none (a file, then); a bad number is a clear error."""
    name, colon, number = text.partition(":")
    if not colon or name not in NAMED:
        return None
    if not number.isdigit():
        raise ValueError(f"policy={text}: {name}:{NUMBER_OF[name]} takes an integer {NUMBER_OF[name]}")
    try:
        return NAMED[name](int(number))
    except ValueError as e:
        raise ValueError(f"policy={text}: {e}") from None


def read_policy(text: str) -> SpeculationPolicy:
    """A ``policy=`` value other than ``auto`` and ``off``: a named policy or a file (read now: errors name it)."""
    return named_policy(text) or SpeculationPolicy.from_file(text)


def _context(rule: BudgetRule) -> dict:
    return {"context_len": rule.context_len} if rule.context_len else {}


def _rule_list(rules) -> list:
    if not isinstance(rules, list):
        raise ValueError('draft_budget must be a list of {"batch_size": B, "context_len": C, "draft_nodes": N}')
    return rules


def _rule(raw) -> BudgetRule:
    if (
        not isinstance(raw, dict)
        or not {"batch_size", "draft_nodes"} <= set(raw)
        or set(raw) - {"batch_size", "context_len", "draft_nodes"}
    ):
        raise ValueError(f"draft_budget: each rule is {{batch_size, draft_nodes[, context_len]}}, got {raw!r}")
    try:
        return BudgetRule(int(raw["batch_size"]), int(raw.get("context_len", 0)), int(raw["draft_nodes"]))
    except (TypeError, ValueError):
        raise ValueError(f"draft_budget: batch_size, context_len and draft_nodes must be integers, got {raw!r}") from None


def _contexts(raw) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw):
        raise ValueError('tuned_contexts must be a list of contexts such as ["workload", "4096"]')
    return tuple(raw)


def _number(raw: dict, key: str, kind: type) -> float | int:
    try:
        return kind(raw[key])
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, got {raw[key]!r}") from None


def _legacy_rules(table) -> list[dict]:
    if not isinstance(table, dict):
        raise ValueError('by_batch_size must be an object {"batch size": draft nodes}')
    try:
        return [{"batch_size": int(b), "draft_nodes": int(n)} for b, n in table.items()]
    except (TypeError, ValueError):
        raise ValueError("by_batch_size: batch sizes and draft nodes must be integers") from None


def add_policy_flag(parser) -> None:
    """``--policy``, as generate, bench and serve take it (``methods.with_policy`` applies it)."""
    parser.add_argument(
        "--policy",
        default=None,
        help="a speculation policy for every speculative method left at its default one: shared:B (B draft nodes a "
        "step shared by the batch), plain_above:N (plain decoding above N running requests), a file (JSON: draft "
        "budgets by load, a floor on each request's acceptance; README), or auto (what `speculab tune` chose for this "
        "machine, target and method); off (the default): each method's own",
    )
