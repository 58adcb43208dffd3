"""Each token's logprob under the target's raw distribution, and the most likely tokens there."""

import torch

from speculab.logprobs import token_logprobs


def test_logprobs_are_the_raw_log_softmax_at_each_row():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 3.5, 0.0]])
    got = token_logprobs(logits, [1, 2], top=2)
    expected = logits.log_softmax(-1)
    assert [t.token_id for t in got] == [1, 2]
    assert abs(got[0].logprob - float(expected[0, 1])) < 1e-6 and abs(got[1].logprob - float(expected[1, 2])) < 1e-6
    assert [i for i, _ in got[0].top] == [0, 1] and [i for i, _ in got[1].top] == [2, 1]
    assert token_logprobs(logits, [3, 0], top=0)[0].top == ()
