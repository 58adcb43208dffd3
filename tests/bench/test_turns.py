"""Engines taking turns: each on its own clock, alternating step by step, with the outputs each gives alone."""

import time

from speculab.bench.turns import OwnClock, Turn, take_turns
from speculab.engine import Engine
from speculab.sampling import SamplingParams
from speculab.speculative.ngram import NgramProposer
from tests.helpers import tiny_model

PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12], [3, 4, 3, 4, 3, 4], [20, 21, 22]]


def test_own_clock_stands_still_while_stopped():
    clock = OwnClock()
    before = clock()
    time.sleep(0.05)
    assert clock() == before  # starts stopped
    clock.start()
    time.sleep(0.02)
    clock.stop()
    ran = clock() - before
    time.sleep(0.05)
    assert clock() - before == ran and ran >= 0.02  # the wait after stop() is not counted


def new_turn(model, proposer, log: list, name: str) -> Turn:
    clock = OwnClock()
    engine = Engine(model, 2, 64, frozenset(), proposer, clock=clock)
    requests = [engine.add_request(p, SamplingParams(max_tokens=10, ignore_eos=True)) for p in PROMPTS]
    step = engine.step

    def logged_step():
        log.append(name)
        return step()

    engine.step = logged_step
    return Turn(engine, requests, clock, started=clock())


def test_turns_alternate_step_by_step_and_each_gives_its_outputs_alone():
    model = tiny_model(seed=3).eval()
    alone_log: list[str] = []
    alone = [
        new_turn(model, None, alone_log, "plain"),
        new_turn(model, NgramProposer(num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=3), alone_log, "ngram"),
    ]
    take_turns(alone)  # infinite turns: one engine after the other
    assert alone_log == sorted(alone_log, key=["plain", "ngram"].index)
    log: list[str] = []
    started = time.perf_counter()
    turns = [
        new_turn(model, None, log, "plain"),
        new_turn(model, NgramProposer(num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=3), log, "ngram"),
    ]
    take_turns(turns, turn_s=0.0)  # a turn of no time is one step
    wall = time.perf_counter() - started
    shorter = min(log.count("plain"), log.count("ngram"))
    assert log[: 2 * shorter] == ["plain", "ngram"] * shorter and shorter >= 5
    for together, apart in zip(turns, alone):
        assert [r.output_ids for r in together.requests] == [r.output_ids for r in apart.requests]
        assert all(len(r.token_times) == len(r.output_ids) == 10 for r in together.requests)
        assert all(r.admitted_time >= r.arrival_time == together.started for r in together.requests)
    assert sum(t.elapsed for t in turns) <= wall  # each counted its own steps, not the other's
