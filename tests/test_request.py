"""A request's own state: finished once it has a reason, time to first token from its arrival."""

from speculab.request import Request, TokenEvent
from speculab.sampling import SamplingParams


def test_a_request_finishes_with_a_reason_and_times_its_first_token():
    request = Request(0, [1, 2, 3], SamplingParams(max_tokens=2), frozenset({0}), arrival_time=10.0)
    assert not request.finished and request.ttft is None
    request.token_times += [10.25, 10.5]
    request.finish_reason = "length"
    assert request.finished and request.ttft == 0.25
    assert TokenEvent(request, [7], finished=True).request is request
