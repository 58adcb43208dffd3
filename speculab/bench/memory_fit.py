"""Whether a batch size's rounds fit in memory, and how they adapt when they do not.

The rounds of ``speculab bench`` keep every method's engine alive while they take turns (``in_process.round_in_turns``);
with long contexts or a large batch their KV caches outgrow the machine, and a process that outgrows it is killed by
the kernel without a word. So before a batch size's rounds the run adds up each engine's bytes (``engine.engine_bytes``:
the target's KV and its drafter's state, once written) against the memory free now (``free_memory``: the weights,
the drafters and the prompt cache are resident already) and takes the first way that fits:
1. every engine alive, taking turns (the rounds as they are meant);
2. in groups: each group the baseline's engine and as many other methods' engines as fit beside it (first fit, in the
   methods' order; the baseline's bytes counted in every group), the groups one after another, each taking turns; a
   method's speedup is then over the baseline's run in its own group, so drift is still taken out pair by pair.
   Only where every method fits beside the baseline;
3. each method alone, one after another, in every round (as the first round always runs);
4. the same after releasing the prompt cache (its bytes come back; the cells after it prefill their prompts, and
   record ``prompt_cache: false``);
5. a method that fits in none of these is skipped: its record says why, with the bytes.

Knows: bytes, which engine is the baseline's, and that order. Does not know: how rounds run (``in_process.py``) or what
the bytes are made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speculab.free_memory import gib, usable_bytes

SKIPPED = "skipped"  # the record kind of a cell the machine's memory could not hold
ALONE = "alone, one after another (memory)"  # ``memory.rounds`` of cells whose rounds ran each engine alone
IN_GROUPS = "in groups with the baseline (memory)"  # ``memory.rounds`` begins so where rounds ran in groups


@dataclass(frozen=True)
class RoundsFit:
    """How one batch size's rounds run in the memory free before them."""

    in_turns: bool  # every engine alive at once, taking turns; False: in groups, else each alone, one after another
    release_cache: bool  # the prompt cache released first
    engine_bytes: dict[str, int]  # label -> its engine's bytes at this batch size
    available_bytes: int  # free before the rounds (the prompt cache's bytes added where it is released)
    skipped: dict[str, str] = field(default_factory=dict)  # label -> why, with the bytes
    groups: tuple[tuple[str, ...], ...] = ()  # the way of groups: each the baseline's label, then its methods' labels

    def cell_fields(self, label: str) -> dict:
        """What a measured cell records of the fit."""
        memory = {"engine_bytes": self.engine_bytes[label], "available_bytes": self.available_bytes, "rounds": self.rounds_text}
        if self.groups:
            memory["groups"] = [list(g) for g in self.groups]
        return {"memory": memory}

    @property
    def rounds_text(self) -> str:
        if self.in_turns:
            return "in turns"
        if self.groups:
            return f"{IN_GROUPS}: " + ", ".join("+".join(g) for g in self.groups)
        return ALONE


def fit_rounds(engine_bytes: dict[str, int], available: int, cache_bytes: int, baseline: str | None = None) -> RoundsFit:
    """The first of the module docstring's ways whose engines fit in ``available`` (the margin kept free);
    ``baseline``: the baseline's label among ``engine_bytes`` (None: none is measured, so no groups)."""
    if sum(engine_bytes.values()) <= usable_bytes(available):
        return RoundsFit(True, False, engine_bytes, available)
    groups = beside_baseline(engine_bytes, usable_bytes(available), baseline) if baseline in engine_bytes else ()
    if groups:
        return RoundsFit(False, False, engine_bytes, available, groups=groups)
    if all(b <= usable_bytes(available) for b in engine_bytes.values()):
        return RoundsFit(False, False, engine_bytes, available)
    released = available + cache_bytes
    release = cache_bytes > 0 and any(usable_bytes(available) < b <= usable_bytes(released) for b in engine_bytes.values())
    room = released if release else available
    skipped = {
        label: f"its engine needs {gib(b)} and {gib(room)} is free (the prompt cache {'released' if release else 'empty'})"
        for label, b in engine_bytes.items()
        if b > usable_bytes(room)
    }
    return RoundsFit(False, release, engine_bytes, room, skipped)


def beside_baseline(engine_bytes: dict[str, int], usable: int, baseline: str) -> tuple[tuple[str, ...], ...]:
    """The other methods in groups that each fit in ``usable`` beside the baseline's engine: first fit, in the order of
    ``engine_bytes`` (the specs'); () where some method does not fit beside the baseline even alone (then no group
    holds it, and the rounds run each engine alone)."""
    room = usable - engine_bytes[baseline]
    groups: list[list[str]] = []
    used: list[int] = []
    for label, b in engine_bytes.items():
        if label == baseline:
            continue
        if b > room:
            return ()
        at = next((i for i, u in enumerate(used) if u + b <= room), None)
        if at is None:
            groups.append([label])
            used.append(b)
        else:
            groups[at].append(label)
            used[at] += b
    return tuple((baseline, *g) for g in groups)


def skipped_record(label: str, method: str, batch_size: int, fit: RoundsFit) -> dict:
    """The record of an in-process cell not measured (never left out in silence)."""
    return skipped_cell(label, method, batch_size, fit.skipped[label], fit.engine_bytes[label], fit.available_bytes)


def skipped_cell(label: str, method: str, batch_size: int, reason: str, engine_bytes: int, available_bytes: int) -> dict:
    """The record of a cell the machine's memory could not hold: its reason and bytes, for the report."""
    return {
        "kind": SKIPPED,
        "method": method,
        "label": label,
        "batch_size": batch_size,
        "reason": reason,
        "engine_bytes": engine_bytes,
        "available_bytes": available_bytes,
    }
