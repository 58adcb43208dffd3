"""The cost model's arithmetic on hand-made steps: tau pooled over batch sizes, predicted tok/s, the chosen policy."""

import pytest

from speculab.policy.table import SpeculationPolicy
from speculab.tune.cost_model import CostModel
from speculab.tune.sweep import Step


def steps(
    batch_size: int, budget: int, ms: float, emitted: list[int], n: int = 3, domain: str = "python", nodes: int | None = None
) -> list[Step]:
    drafted = (budget if nodes is None else nodes,) * len(emitted)
    return [Step(batch_size, budget, ms / 1e3, 0.001 * budget, tuple(emitted), drafted, (domain,) * len(emitted)) for _ in range(n)]


def model() -> CostModel:
    # tau at budget 2, pooled: (3 steps x 3 tokens + 3 x (1 + 3 + 2 + 2)) / 15 request-steps = 2.2
    # batch 1: a budget of 2 costs 12 ms against 10: it wins (183.3 vs 100 tok/s);
    # batch 4: the same budget costs 32 ms against 14: plain decoding wins (275 vs 285.7 tok/s)
    return CostModel.from_steps(
        steps(1, 0, 10.0, [1]) + steps(1, 2, 12.0, [3]) + steps(4, 0, 14.0, [1, 1, 1, 1]) + steps(4, 2, 32.0, [1, 3, 2, 2], domain="sql")
    )


def test_tau_pools_every_batch_size_and_counts_depths():
    m = model()
    assert m.acceptance["tau"] == {0: 1.0, 2: pytest.approx((3 * 3 + 3 * 8) / 15)}
    assert m.acceptance["tau_by_domain"][2] == {"python": 3.0, "sql": 2.0}
    # request-steps taking more than d tokens: d = 1 accepted one draft, d = 2 two
    assert m.acceptance["accepted_at_depth"][2] == pytest.approx([12 / 15, 6 / 15])


def test_predicted_tok_s_is_batch_times_tau_over_the_step():
    m = model()
    tau = m.acceptance["tau"][2]
    assert m.cell(1, 2).predicted_tok_s == pytest.approx(1 * tau / 0.012)
    assert m.cell(4, 0).predicted_tok_s == pytest.approx(4 / 0.014)
    assert m.cell(1, 2).propose_ms == pytest.approx(2.0) and m.cell(1, 2).steps == 3


def test_the_policy_drafts_where_it_pays_and_stops_where_it_does_not():
    m = model()
    assert m.best(1).budget == 2 and m.best(4).budget == 0
    assert m.policy() == SpeculationPolicy.by_batch_size({1: 2, 4: 0})
    assert m.to_dict()["acceptance"]["tau"]["0"] == 1.0


def test_tau_pools_cells_by_the_nodes_they_drafted_not_by_their_cap():
    # at batch 4 a budget leaves one node whatever the budget: budget 2 there is budget 1's draft and takes its tau
    m = CostModel.from_steps(
        steps(1, 1, 12.0, [2]) + steps(1, 2, 13.0, [3]) + steps(4, 1, 20.0, [1, 1, 2, 2]) + steps(4, 2, 20.0, [2, 2, 2, 2], nodes=1)
    )
    assert m.cell(4, 2).nodes == 1 and m.cell(1, 2).nodes == 2
    assert m.cell(4, 2).tau == m.cell(4, 1).tau == pytest.approx((3 * 2 + 12 * 1.5 + 12 * 2) / 27)
    assert m.cell(1, 2).tau == 3.0


def test_a_gain_within_the_noise_goes_to_the_smaller_cap():
    """Cap 1's steps vary (10 or 14 ms): its prediction's standard error covers the 2% it gains over plain decoding."""
    noisy = [Step(1, 1, ms / 1e3, 0.0, (2,), (1,), ("python",)) for ms in (10.0, 14.0) * 4]
    plain = steps(1, 0, 10.0, [1], n=8)
    m = CostModel.from_steps(plain + noisy)
    assert m.cell(1, 1).predicted_tok_s == pytest.approx(2 / 0.012) and m.cell(1, 1).predicted_se > 0
    assert m.best(1).budget == 1  # 166.7 against 100: far beyond the noise
    slow = [Step(1, 1, ms / 1e3, 0.0, (2,), (1,), ("python",)) for ms in (15.0, 24.0) * 4]  # 102.6 tok/s, its standard error about 9
    assert CostModel.from_steps(plain + slow).best(1).budget == 0


def test_equal_caps_in_a_row_are_one_entry_and_a_tie_takes_the_smaller_cap():
    m = CostModel.from_steps(steps(1, 0, 10.0, [1]) + steps(1, 1, 20.0, [2]) + steps(2, 0, 10.0, [1, 1]) + steps(2, 1, 20.0, [2, 2]))
    assert m.best(1).budget == 0 and m.policy() == SpeculationPolicy.by_batch_size({1: 0})


def test_a_chain_drafter_is_modelled_from_every_step_truncated_to_each_cap():
    """Cap 2's steps say what budget 1 would have given (1 + min(accepted, 1)); the time is a fit on draft nodes."""
    plain = steps(1, 0, 10.0, [1], nodes=0)
    two = [Step(1, 2, t / 1e3, 0.0, (e,), (d,), ("python",)) for t, e, d in ((12.0, 3, 2), (12.0, 1, 2), (11.0, 1, 1), (12.0, 2, 2))]
    one = [Step(1, 1, 11.0 / 1e3, 0.0, (e,), (1,), ("sql",)) for e in (2, 1)]
    m = CostModel.from_steps(plain + two + one, chains=True)
    # budget 1 from budget 1's and budget 2's request-steps: 1 + min(e - 1, 1) = 2, 1, 1, 2 and 2, 1
    assert m.acceptance["tau"][1] == pytest.approx(9 / 6) and m.acceptance["tau"][2] == pytest.approx(7 / 4)
    assert m.acceptance["nodes"] == {0: 0.0, 1: 1.0, 2: pytest.approx(7 / 4)}
    assert m.acceptance["tau_by_domain"][1] == {"python": 1.5, "sql": 1.5}
    # the time: exactly 10 ms + 1 ms a node on these steps
    assert m.cell(1, 2).step_ms == pytest.approx(10 + 7 / 4)
    assert m.cell(1, 2).predicted_tok_s == pytest.approx((7 / 4) / (11.75 / 1e3))
    assert m.cell(1, 0).tau == 1.0 and m.cell(1, 0).step_ms == pytest.approx(10.0)
