"""Sizing ``speculab bench --quick`` to a time limit: interpolated rates, prompts per batch size (the run
record and the cells: ``test_runner.py``)."""

import pytest

from speculab.bench.sizing import prompts_per_batch, rate_at, remembered

RATES = {1: 36.0, 16: 100.0}  # plain decoding tok/s at batch 1 and 16 on a 2-core AVX2 machine


def test_rates_between_the_measured_sizes_are_geometric_in_log2_batch():
    assert rate_at({1: 10.0, 16: 160.0}, 4) == pytest.approx(40.0)  # halfway in log2: the geometric mean
    assert rate_at({1: 10.0, 16: 160.0}, 1) == 10.0 and rate_at({1: 10.0, 16: 160.0}, 32) == 160.0
    assert rate_at({2: 20.0}, 8) == 20.0


def test_each_batch_size_gets_whole_batches_within_its_share():
    sized = prompts_per_batch(RATES, (1, 2, 4, 8, 16), cells_per_batch=4, max_tokens=64, repeats=3, limit_s=420, num_prompts=16)
    # a share of 21 s per cell: batch 1 fits 3.9 prompts at 36 tok/s, batch 16 one batch of 16 (its minimum)
    assert sized == {1: 3, 2: 4, 4: 4, 8: 8, 16: 16}
    for b, n in sized.items():
        assert n % b == 0
        if n > b:  # more than the one batch every size gets: it fits its share
            assert n * 64 * 3 / rate_at(RATES, b) <= 420 / 5 / 4


def test_a_large_limit_runs_every_prompt_and_a_small_workload_caps_it():
    assert prompts_per_batch(RATES, (1, 4), 1, 64, 3, 1e6, 16) == {1: 16, 4: 16}
    assert prompts_per_batch(RATES, (1, 8), 1, 64, 3, 1e6, 6) == {1: 6, 8: 6}  # fewer prompts than a batch: all of them


def test_a_rerun_on_this_machine_runs_the_sizing_an_earlier_run_chose(tmp_path, monkeypatch):
    """Two runs whose calibrations differ a little (113 and 123 tok/s at batch 1) would size batch 1 at 8 and 9
    prompts: a different prompt set, whose acceptance moves every speedup. The second takes the first's."""
    monkeypatch.setattr("speculab.bench.sizing.cache_dir", lambda: tmp_path)
    first = prompts_per_batch({1: 112.8, 16: 351.0}, (1, 16), 5, 64, 3, 144, 16)
    second = prompts_per_batch({1: 122.7, 16: 399.7}, (1, 16), 5, 64, 3, 144, 16)
    assert first != second  # the calibrations alone would part
    settings = {"methods": ["baseline", "eagle"], "max_tokens": 64}
    first, second = {"workload": first}, {"workload": second}
    assert remembered(settings, first) == (first, False)
    assert remembered(settings, second) == (first, True)
    assert remembered(settings | {"max_tokens": 32}, second) == (second, False)  # other settings: their own sizing


def test_every_cell_runs_a_prompt_of_each_language_at_least():
    """A share too small for more still runs one prompt of each of 4 languages, in whole batches."""
    assert prompts_per_batch(RATES, (1, 4, 16), 6, 32, 3, 1.0, 16, least=4) == {1: 4, 4: 4, 16: 16}
    assert prompts_per_batch(RATES, (1, 3), 6, 32, 3, 1.0, 16, least=4) == {1: 4, 3: 6}
    assert prompts_per_batch(RATES, (1,), 6, 32, 3, 1.0, 2, least=4) == {1: 2}  # no more prompts than the workload's
