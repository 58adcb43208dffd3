"""Findings computed from the numbers: break-even batch sizes, who is fastest where, the recommendation.

Knows: the measured cells (``Results``) and their speedups (``Results.measured_speedup``, the one the tables
show); methods by their short labels. Does not know: rendering; every sentence is built from fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speculab.bench.report.numbers import context_name, count, num, size, times
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


def _pays_and_fastest(results: Results, label: str) -> tuple[str, str]:
    """Where a label pays off at this context, from its speedups, and the batch sizes where it is fastest ('' if none)."""
    batches = results.batches_of(label)
    fastest = ranges([b for b, ranked in winners(results).items() if ranked and ranked[0][0] == label], results.batch_sizes)
    if not batches:
        return "not measured", ""
    if results.is_baseline(label):
        return "reference", fastest
    speedups = {b: results.speedup(label, b) for b in batches}
    if all(s is None for s in speedups.values()):
        return "no baseline to compare", fastest
    faster = [b for b, s in speedups.items() if s is not None and s > 1.0]
    if not faster:
        return "never faster", ""
    if faster == batches:
        return f"all measured batch sizes ({batches[0]}–{batches[-1]})", fastest
    if faster == batches[: len(faster)]:
        return f"batch ≤ {faster[-1]}", fastest
    return f"batch {ranges(faster, batches)}", fastest


def best_use(results: Results, label: str) -> str:
    """Where a label pays off, from its speedups and from where it is fastest; with several contexts, at each, named
    (``batch ≤ 2 at 1.2k; batch ≤ 8 at 4.1k``)."""
    if not results.several_contexts:
        pays, fastest = _pays_and_fastest(results, label)
        pays = "never faster here" if pays == "never faster" else pays
        return f"{pays}; fastest at batch {fastest}" if fastest else pays
    found = {context_name(results, view.context): _pays_and_fastest(view, label) for view in results.views}
    if results.is_baseline(label):
        fastest = [f"{f} at {name}" for name, (_, f) in found.items() if f]
        return "reference" + (f"; fastest at batch {', '.join(fastest)}" if fastest else "")
    return "; ".join(f"{pays} at {name}" + (f" (fastest at batch {f})" if f else "") for name, (pays, f) in found.items())


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


def _fastest_sentence(results: Results, label: str, batches: list[int], ranked: dict[int, list[tuple[str, float]]], at: str = "") -> str:
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
    return f"At {at}batch {where}, {name} is fastest: " + "; ".join(figures(b) for b in ends) + "."


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
    """Paragraphs: who is fastest where; what each winner costs in memory; the recommendation. With several
    contexts, who is fastest and the recommendation at each, named."""
    several = results.several_contexts
    base = results.baseline_label
    fastest, chosen, winning, settings = [], [], [], []
    for view in results.views if several else [results]:
        name = context_name(results, view.context)
        ranked, runs = winners(view), winner_runs(view)
        fastest += [_fastest_sentence(view, lab, bs, ranked, f"{name} and " if several else "") for lab, bs in runs]
        said = ("; " if not several else ", ").join(
            f"{'no speculation' if view.is_baseline(lab) else view.short(lab)} at batch {ranges(bs, view.batch_sizes)}" for lab, bs in runs
        )
        chosen += [f"at {name}: {said}" if several else said] if said else []
        winning += [lab for lab, _ in runs if not view.is_baseline(lab)]
        settings.append(_one_setting(runs, base))
    memory = [_memory_sentence(results, lab) for lab in dict.fromkeys(winning)]
    verdict = [] if base else ["There is no baseline in these results, so no speedups."]
    if chosen:
        verdict.append(f"**Recommendation from these measurements:** {'; '.join(chosen)}.")
    setting = _setting_sentence(results, settings)
    if setting:
        verdict.append(setting)
    return [" ".join(p) for p in (fastest, memory, verdict) if p]


def _one_setting(runs: list[tuple[str, list[int]]], base: str | None) -> tuple[str, int] | None:
    """When one speculative method wins every batch size below those where plain decoding wins: that method and the
    largest batch size it wins, above which one server setting would switch speculation off."""
    spec = {lab for lab, _ in runs if lab != base}
    if base is None or len(spec) != 1 or runs[-1][0] != base or runs[0][0] == base:
        return None
    (label,) = spec
    spec_batches = [b for lab, bs in runs if lab == label for b in bs]
    base_batches = [b for lab, bs in runs if lab == base for b in bs]
    return None if max(spec_batches) >= min(base_batches) else (label, max(spec_batches))


def _setting_sentence(results: Results, settings: list[tuple[str, int] | None]) -> str | None:
    """The one server setting that follows every context's winners, where one method wins below plain decoding at
    each; a threshold that moves with the context is said, as ``plain_above`` keys on batch size alone."""
    if not settings or None in settings or len({lab for lab, _ in settings}) != 1:
        return None
    label, above = settings[0]
    if len({n for _, n in settings}) == 1:
        return (
            f"As one server setting: {results.short(label)} under the policy `plain_above:{above}`, which decodes "
            f"plainly above {above} running requests (measure it as `{results.method(label)}:...,policy=plain_above:{above}`)."
        )
    where = [f"{n} running requests at {context_name(results, view.context)}" for view, (_, n) in zip(results.views, settings)]
    where[1:] = [w.replace(" running requests", "", 1) for w in where[1:]]
    return (
        f"As one server setting: {results.short(label)} with plain decoding above {' and '.join(where)}: the threshold moves with "
        "the context length, so it takes a policy keyed on context length too (a policy file's draft budget by batch size "
        "and context length); `plain_above:N` keys on batch size alone."
    )
