"""The engine thread: continuous batching, aborts, a full queue, and a failing step that does not end the server."""

from __future__ import annotations

import asyncio

import pytest

from speculab.engine import Engine
from speculab.sampling import SamplingParams
from speculab.serve.metrics import ServerMetrics
from speculab.serve.worker import EngineWorker, QueueFull
from speculab.speculative.proposer import Proposer
from tests.helpers import tiny_model


class FailsOnce(Proposer):
    """Raises in its first propose(), then proposes nothing: a step that breaks once."""

    failed = False

    def propose(self, state):
        if not FailsOnce.failed:
            FailsOnce.failed = True
            raise RuntimeError("drafter exploded")
        return super().propose(state)


async def drain(handle) -> tuple[list[int], str | None, str | None]:
    tokens = []
    while True:
        out = await asyncio.wait_for(handle.outputs.get(), 60)
        tokens += out.token_ids
        if out.finish_reason or out.error:
            return tokens, out.finish_reason, out.error


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def make_worker(proposer=None, max_batch=2, max_queue=1) -> EngineWorker:
    engine = Engine(tiny_model(seed=3), max_batch, 128, frozenset(), proposer)
    return EngineWorker(engine, ServerMetrics("tiny"), max_queue)


def test_requests_join_and_leave_the_batch():
    async def main():
        worker = make_worker()
        worker.start()
        try:
            handles = [worker.submit([5, 6, 7 + i], SamplingParams(max_tokens=4 + i, ignore_eos=True)) for i in range(3)]
            return [await drain(h) for h in handles]
        finally:
            worker.stop()

    results = run(main())
    assert [(len(t), reason) for t, reason, _ in results] == [(4, "length"), (5, "length"), (6, "length")]


def test_full_queue_is_refused_before_the_engine():
    async def main():
        worker = make_worker(max_batch=1, max_queue=1)
        worker.start()
        try:
            first = worker.submit([5, 6], SamplingParams(max_tokens=50, ignore_eos=True))
            worker.submit([5, 7], SamplingParams(max_tokens=2, ignore_eos=True))
            with pytest.raises(QueueFull, match="full"):
                worker.submit([5, 8], SamplingParams(max_tokens=2))
            worker.abort(first)
            tokens, reason, _ = await drain(first)
            assert reason == "abort" and len(tokens) < 50
            again = worker.submit([5, 9], SamplingParams(max_tokens=3, ignore_eos=True))  # the aborted one's place is free
            return await drain(again)
        finally:
            worker.stop()

    tokens, reason, _ = run(main())
    assert len(tokens) == 3 and reason == "length"


def test_a_failing_step_fails_its_requests_and_the_next_ones_run():
    FailsOnce.failed = False

    async def main():
        worker = make_worker(FailsOnce())
        worker.start()
        try:
            first = worker.submit([5, 6], SamplingParams(max_tokens=6, ignore_eos=True))
            _, _, error = await drain(first)
            later = worker.submit([5, 6], SamplingParams(max_tokens=6, ignore_eos=True))
            return error, await drain(later)
        finally:
            worker.stop()

    error, (tokens, reason, later_error) = run(main())
    assert "drafter exploded" in error
    assert later_error is None and reason == "length" and len(tokens) == 6


def test_a_request_the_engine_refuses_fails_alone_and_the_loop_goes_on(monkeypatch):
    """Whatever slips past the route's checks and makes ``add_request`` raise fails that request, not the loop."""

    async def main():
        worker = make_worker()
        real = worker.engine.add_request

        def refuses_seed_13(prompt_ids, params):
            if params.seed == 13:
                raise OverflowError("seed out of range")
            return real(prompt_ids, params)

        monkeypatch.setattr(worker.engine, "add_request", refuses_seed_13)
        worker.start()
        try:
            bad = worker.submit([5, 6], SamplingParams(max_tokens=4, temperature=1.0, seed=13))
            good = worker.submit([5, 6], SamplingParams(max_tokens=4, ignore_eos=True))
            return await drain(bad), await drain(good)
        finally:
            worker.stop()

    (_, _, error), (tokens, reason, good_error) = run(main())
    assert "seed out of range" in error
    assert good_error is None and reason == "length" and len(tokens) == 4
