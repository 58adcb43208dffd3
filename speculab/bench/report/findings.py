"""Findings computed from the numbers: break-even batch sizes, who is fastest where, the recommendation.

Knows: the measured cells (``Results``) and their speedups (``Results.measured_speedup``, the one the tables
show); methods by their short labels. Does not know: rendering; every sentence is built from fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speculab.bench.report.numbers import count, num, size, times
from speculab.bench.report.results import Results


@dataclass(frozen=True)
class BreakEven:
    last_faster: int | None  # largest measured batch size with speedup >= 1
    first_slower: int | None  # smallest measured batch size with speedup < 1
    crossing: float | None  # batch where speedup = 1, linear in log2(batch) between first_slower and the point before it
    recovers: bool  # speedup >= 1 again at a batch size above first_slower


def break_even(points: list[tuple[int, float | None]]) -> BreakEven:
    """Break-even of one method from (batch_size, speedup) points, any order; points without speedup are dropped."""
    pts = sorted((b, s) for b, s in points if s is not None)
    last_faster = max((b for b, s in pts if s >= 1.0), default=None)
    slower_at = next((i for i, (_, s) in enumerate(pts) if s < 1.0), None)
    if slower_at is None:
        return BreakEven(last_faster, None, None, False)
    first_slower = pts[slower_at][0]
    crossing = None
    if slower_at > 0:  # every earlier point is >= 1
        (b0, s0), (b1, s1) = pts[slower_at - 1], pts[slower_at]
        x0, x1 = math.log2(b0), math.log2(b1)
        crossing = 2 ** (x0 + (1.0 - s0) * (x1 - x0) / (s1 - s0))
    return BreakEven(last_faster, first_slower, crossing, last_faster is not None and last_faster > first_slower)


def winners(results: Results) -> dict[int, list[tuple[str, float]]]:
    """Per batch size: (label, tok_s) of every label measured there, fastest first."""
    table: dict[int, list[tuple[str, float]]] = {}
    for batch in results.batch_sizes:
        ranked = [(lab, results.tok_s(lab, batch)) for lab in results.labels]
        table[batch] = sorted(((lab, t) for lab, t in ranked if t is not None), key=lambda x: -x[1])
    return table


def ranges(batches: list[int], all_batches: list[int]) -> str:
    """'1–4, 16' for batches that are runs of consecutive measured sizes."""
    groups: list[list[int]] = []
    for b in batches:
        if groups and all_batches.index(b) == all_batches.index(groups[-1][-1]) + 1:
            groups[-1].append(b)
        else:
            groups.append([b])
    return ", ".join(str(g[0]) if len(g) == 1 else f"{g[0]}–{g[-1]}" for g in groups)


def best_use(results: Results, label: str) -> str:
    """Where a label pays off, from its speedups and from where it is fastest."""
    batches = results.batches_of(label)
    fastest = [b for b, ranked in winners(results).items() if ranked and ranked[0][0] == label]
    tail = f"; fastest at batch {ranges(fastest, results.batch_sizes)}" if fastest else ""
    if results.is_baseline(label):
        return f"reference{tail}"
    speedups = {b: results.speedup(label, b) for b in batches}
    if all(s is None for s in speedups.values()):
        return f"no baseline to compare{tail}"
    faster = [b for b, s in speedups.items() if s is not None and s > 1.0]
    if not faster:
        return "never faster here"
    if faster == batches:
        return f"all measured batch sizes ({batches[0]}–{batches[-1]}){tail}"
    if faster == batches[: len(faster)]:
        return f"batch ≤ {faster[-1]}{tail}"
    return f"batch {ranges(faster, batches)}{tail}"


def break_even_text(results: Results, label: str, be: BreakEven) -> str:
    pts = {b: results.speedup(label, b) for b in results.batches_of(label)}
    if all(s is None for s in pts.values()):
        return "no baseline at its batch sizes"
    if be.first_slower is None:
        return f"speedup ≥ 1 at every measured batch size (up to {be.last_faster}); no break-even observed"
    measured = sorted(b for b, s in pts.items() if s is not None)
    if be.crossing is None:
        text = f"slower than baseline from the smallest measured batch size ({be.first_slower}: {times(pts[be.first_slower])})"
    else:
        before = measured[measured.index(be.first_slower) - 1]
        text = (
            f"speedup ≥ 1 up to batch {before} ({times(pts[before])}), below 1 at batch {be.first_slower} ({times(pts[be.first_slower])}); "
            f"break-even ≈ batch {be.crossing:.1f} (interpolated linearly in log2(batch))"
        )
    if be.recovers:
        text += f"; speedup is ≥ 1 again at batch {be.last_faster} (not monotonic)"
    return text


def winner_runs(results: Results) -> list[tuple[str, list[int]]]:
    """(label, batch sizes) for each run of consecutive batch sizes one label is fastest at."""
    runs: list[tuple[str, list[int]]] = []
    for b, order in winners(results).items():
        if not order:
            continue
        if runs and runs[-1][0] == order[0][0]:
            runs[-1][1].append(b)
        else:
            runs.append((order[0][0], [b]))
    return runs


def _fastest_sentence(results: Results, label: str, batches: list[int], ranked: dict[int, list[tuple[str, float]]]) -> str:
    def figures(b: int) -> str:
        order = ranked[b]
        tok = results.tok_s(label, b)
        parts = [f"{num(tok)} tok/s at batch {b}"]
        if not results.is_baseline(label) and results.speedup(label, b) is not None:
            parts.append(f"{times(results.speedup(label, b))} baseline")
        if len(order) > 1:
            second, second_tok = order[1]
            parts.append(f"{100 * (tok / second_tok - 1):+.0f}% over {results.short(second)}")
        return ", ".join(parts)

    where = ranges(batches, results.batch_sizes)
    ends = [batches[0]] if len(batches) == 1 else [batches[0], batches[-1]]
    name = f"plain decoding ({results.short(label)})" if results.is_baseline(label) else results.short(label)
    return f"At batch {where}, {name} is fastest: " + "; ".join(figures(b) for b in ends) + "."


def _memory_sentence(results: Results, label: str) -> str:
    mem = results.memory(label)
    if not mem:
        return f"{results.short(label)}: no memory estimate recorded."
    base = results.baseline_label
    base_mem = results.memory(base) if base else None
    text = f"{results.short(label)} costs {size(mem.get('drafter_weights_bytes'))} of drafter weights and {size(mem.get('drafter_kv_bytes_per_token'))} of KV per token"
    target_kv = mem.get("target_kv_bytes_per_token")
    if target_kv:
        text += f" ({100 * mem.get('drafter_kv_bytes_per_token', 0) / target_kv:.1f}% of the target's {size(target_kv)})"
    tokens = mem.get("kv_capacity_tokens")
    if tokens is not None:
        text += f", leaving KV room for {count(tokens)} tokens ({count(mem.get('kv_capacity_sessions'))} sessions of {mem.get('session_tokens')})"
        if base_mem and base_mem.get("kv_capacity_tokens"):
            text += f" against {count(base_mem['kv_capacity_tokens'])} without speculation ({100 * (tokens / base_mem['kv_capacity_tokens'] - 1):+.1f}%)"
    return text + "."


def recommendation(results: Results) -> list[str]:
    """Paragraphs: who is fastest where; what each winner costs in memory; the recommendation."""
    base = results.baseline_label
    ranked = winners(results)
    runs = winner_runs(results)
    fastest = [_fastest_sentence(results, label, batches, ranked) for label, batches in runs]
    memory = [_memory_sentence(results, lab) for lab in dict.fromkeys(lab for lab, _ in runs if not results.is_baseline(lab))]
    verdict = [] if base else ["There is no baseline in these results, so no speedups."]
    chosen = "; ".join(
        f"{'no speculation' if results.is_baseline(lab) else results.short(lab)} at batch {ranges(bs, results.batch_sizes)}"
        for lab, bs in runs
    )
    if chosen:
        verdict.append(f"**Recommendation from these measurements:** {chosen}.")
    setting = _one_setting(results, runs, base)
    if setting:
        verdict.append(setting)
    return [" ".join(p) for p in (fastest, memory, verdict) if p]


def _one_setting(results: Results, runs: list[tuple[str, list[int]]], base: str | None) -> str | None:
    """When one speculative method wins every batch size below those where plain decoding wins, the one
    server setting that follows both: that method with speculation switched off above its range."""
    spec = {lab for lab, _ in runs if lab != base}
    if base is None or len(spec) != 1 or runs[-1][0] != base or runs[0][0] == base:
        return None
    (label,) = spec
    spec_batches = [b for lab, bs in runs if lab == label for b in bs]
    base_batches = [b for lab, bs in runs if lab == base for b in bs]
    if max(spec_batches) >= min(base_batches):
        return None
    return (
        f"As one server setting: {results.short(label)} under the policy `plain_above:{max(spec_batches)}`, which decodes "
        f"plainly above {max(spec_batches)} running requests (measure it as `{results.method(label)}:...,policy=plain_above:"
        f"{max(spec_batches)}`)."
    )
