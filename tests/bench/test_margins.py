"""Logit margins: the top logit, the gap to the second, and the leading tokens' gaps, per row."""

import torch

from speculab.bench.margins import LEADERS, LogitMargin, MarginsByRequest, logit_margins
from speculab.request import Request, TokenEvent
from speculab.sampling import SamplingParams


def test_margins_of_rows():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.5, -1.0, 0.5], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    first, tied = logit_margins(logits)
    assert first.top == 3.0 and first.gap == 0.5 and len(first.leaders) == LEADERS == 4
    assert [t for t, _ in first.leaders] == [1, 3, 2, 5] and first.leaders[2] == (2, 2.0)
    assert first.gap_to(3) == (0.5, True) and first.gap_to(4) == (2.5, False)  # past the leaders: a lower bound
    assert tied.gap == 0.0 and {t for t, _ in tied.leaders[:2]} == {0, 1}


def test_margins_follow_each_request_through_its_events():
    r = Request(7, [1, 2], SamplingParams(), frozenset())
    margins = MarginsByRequest()
    margins.add(TokenEvent(r, [1], False, torch.tensor([[0.0, 2.0, 1.0, 0.0, 0.0]])))
    margins.add(TokenEvent(r, [], True, None))  # an event without logits adds nothing
    margins.add(TokenEvent(r, [0, 2], True, torch.tensor([[4.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 3.0, 2.0, 0.0]])))
    other = Request(8, [1], SamplingParams(), frozenset())
    assert [[m.gap for m in ms] for ms in margins.of([r, other])] == [[1.0, 3.0, 1.0], []]
    assert all(isinstance(m, LogitMargin) for m in margins[7])
