"""Engines taking turns: each runs its steps for a short slice of its own time, then waits while the others run.

Knows: an engine's steps and a clock that stands still while its engine waits (``OwnClock``), so a cell's tok/s and
latencies count its own steps only, and a machine whose speed drifts within seconds (a shared virtual machine) slows
every engine of one round alike. A turn ends at the first step boundary past its slice; a step is never cut.
Also the order of whole passes in rounds (``abba``), for sides that each run a pass at a time (launched servers).
Does not know: methods, what a cell records (``in_process.py``), or the results file.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from tqdm import tqdm

from speculab.bench.margins import MarginsByRequest
from speculab.engine import Engine
from speculab.request import Request

T = TypeVar("T")


def abba(sides: list[T], rounds: int) -> Iterator[tuple[int, T]]:
    """(round, side): every side once a round, the order reversed every other round, so a drift within a round
    reaches every side alike."""
    for round_index in range(rounds):
        for side in sides if round_index % 2 == 0 else sides[::-1]:
            yield round_index, side


class OwnClock:
    """Seconds of one engine's own running: ``perf_counter`` less every wait for its turn. Starts stopped."""

    def __init__(self):
        self._waited = 0.0
        self._stopped_at: float | None = time.perf_counter()  # None while running

    def __call__(self) -> float:
        now = time.perf_counter() if self._stopped_at is None else self._stopped_at
        return now - self._waited

    def start(self) -> None:
        if self._stopped_at is not None:
            self._waited += time.perf_counter() - self._stopped_at
            self._stopped_at = None

    def stop(self) -> None:
        if self._stopped_at is None:
            self._stopped_at = time.perf_counter()


@dataclass
class Turn:
    """One engine's run over its requests, advanced a slice at a time."""

    engine: Engine  # built with ``clock``
    requests: list[Request]
    clock: OwnClock
    margins: MarginsByRequest | None = None  # each output token's logit margins (margins.py), when kept
    bar: tqdm | None = None
    started: float = 0.0  # ``clock`` when the requests arrived

    @property
    def done(self) -> bool:
        return not self.engine.has_work

    @property
    def elapsed(self) -> float:
        """Own seconds from the requests' arrival to the last step so far."""
        return self.clock() - self.started

    def run_for(self, seconds: float) -> None:
        """At least one step, then steps until ``seconds`` of own time have passed or no work is left."""
        self.clock.start()
        end = self.clock() + seconds
        while self.engine.has_work:
            events = self.engine.step()
            if self.margins is not None:
                for event in events:
                    self.margins.add(event)
            if self.bar is not None:
                self.bar.update(sum(len(e.token_ids) for e in events))
            if self.clock() >= end:
                break
        self.clock.stop()


def take_turns(turns: list[Turn], turn_s: float = math.inf) -> None:
    """Run every turn to its end, each for ``turn_s`` of its own time in its place (infinite: one after another)."""
    while not all(t.done for t in turns):
        for t in turns:
            if not t.done:
                t.run_for(turn_s)
