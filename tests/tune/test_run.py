"""The check correcting the in-process tune's policy: a batch size measured below plain decoding goes to plain."""

from speculab.tune.cost_model import Cell, CostModel
from speculab.tune.run import below_plain


def model(plain_tok_s: float, plain_se: float) -> CostModel:
    cell = lambda cap, tok_s, se: Cell(16, cap, cap, 40, 60.0, 60.0, 55.0, 65.0, 0.0, 1.0, tok_s, se)  # noqa: E731
    return CostModel((cell(0, plain_tok_s, plain_se), cell(2, 390.0, 5.0)), {})


def test_a_check_below_plain_beyond_both_spreads_sends_the_batch_size_to_plain():
    """At batch 16 the policy chose cap 2 and the check measured 348 tok/s where plain decoding was predicted at 379
    (the EPYC Zen 5 case that asked for this)."""
    assert below_plain(model(379.0, 4.0), 16, {"tok_s": 348.0, "tok_s_se": 6.0})
    assert not below_plain(model(379.0, 4.0), 16, {"tok_s": 374.0, "tok_s_se": 6.0})  # within the spreads: kept
    assert not below_plain(model(379.0, 40.0), 16, {"tok_s": 348.0, "tok_s_se": 6.0})  # plain's own spread too wide
