"""How decided the target was at each token a run chose: the top logit and the gaps of the leading tokens below it.

Two greedy runs that round differently can only choose differently where the gap between the two tokens they
chose is within their rounding (``divergence.py`` decides). The engine hands over, when asked
(``Engine(token_logits=True)``), the logits each emitted token was chosen from (``TokenEvent.logits``); this
module keeps only what the benchmark needs of them.

Knows: the margins of logits rows, and how to collect them from an engine's events. Does not know: decoding.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from speculab.request import Request, TokenEvent

LEADERS = 4  # the top tokens whose gaps each LogitMargin keeps


class LogitMargin(NamedTuple):
    """How decided the target was where a token was chosen: two greedy runs that round differently can only
    choose differently where the gap between the two tokens they chose is within their rounding
    (``bench/divergence.py``)."""

    top: float  # the top-1 logit
    gap: float  # the top-1 logit minus the top-2 logit (>= 0)
    leaders: tuple[tuple[int, float], ...] = ()  # (token, top-1 logit minus its logit) for the LEADERS top tokens

    def gap_to(self, token: int) -> tuple[float, bool]:
        """(top-1 logit minus ``token``'s logit, exact?): past the leaders, the last one's gap is a lower bound."""
        for candidate, gap in self.leaders:
            if candidate == token:
                return gap, True
        return (self.leaders[-1][1] if self.leaders else self.gap), False


def logit_margins(logits: Tensor) -> list[LogitMargin]:
    """logits: [n, vocab] -> one LogitMargin per row."""
    top = logits.float().topk(min(LEADERS, logits.shape[-1]), dim=-1)
    margins = []
    for values, ids in zip(top.values.tolist(), top.indices.tolist()):
        leaders = tuple((t, values[0] - v) for t, v in zip(ids, values))
        margins.append(LogitMargin(values[0], leaders[1][1] if len(leaders) > 1 else 0.0, leaders))
    return margins


class MarginsByRequest(dict):
    """Request id -> the margins of its output tokens, in order, filled from an engine's events (``add`` is an
    ``Engine.generate`` ``on_token`` callback)."""

    def add(self, event: TokenEvent) -> None:
        if event.logits is not None:
            self.setdefault(event.request.id, []).extend(logit_margins(event.logits))

    def of(self, requests: list[Request]) -> list[list[LogitMargin]]:
        return [self.get(r.id, []) for r in requests]
