"""How far outputs agree with a reference: the share of tokens (or characters) before their first difference.

Knows: sequences of comparable items, token ids or text alike (a server may return text only), paired output by
output. Two empty outputs agree fully (1.0), so every caller states the same figure for the same pair.
Does not know: where the outputs come from, or why they part (``divergence.py`` looks at that).
"""

from __future__ import annotations

from collections.abc import Sequence


def first_difference(a: Sequence, b: Sequence) -> int | None:
    """The first position where ``a`` and ``b`` differ (the shorter one's length when one is a prefix of the other);
    None when they are equal."""
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return n if n is not None else (None if len(a) == len(b) else min(len(a), len(b)))


def prefix_agreement(outputs: Sequence[Sequence], reference: Sequence[Sequence]) -> float:
    """Items before the first difference over all items (the longer of each pair), summed over the pairs.

    1.0 when every pair is equal, empty pairs included."""
    if len(outputs) != len(reference):
        raise ValueError(f"prefix_agreement: {len(outputs)} outputs against {len(reference)} references")
    same = total = 0
    for a, b in zip(outputs, reference, strict=True):
        j = first_difference(a, b)
        same += len(a) if j is None else j
        total += max(len(a), len(b))
    return same / total if total else 1.0
