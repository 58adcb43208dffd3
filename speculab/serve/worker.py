"""The engine's own thread: continuous batching behind an asyncio server.

Knows: the engine is not thread-safe, so one thread owns it and runs
``step()`` while there is work (its own, or the caller's through ``run``); the event loop hands it requests and aborts
through a command queue and gets each step's tokens back through
``call_soon_threadsafe``. A request joins the running batch at the next step
(its prefill) and leaves when it stops; at most ``max_batch`` run and at most
``max_queue`` wait, and a request past that is refused (:class:`QueueFull`)
before it reaches the engine. A request the engine refuses, or that fails in
a step (``Request.error``), fails alone; a step that raises as a whole fails
the requests it was running, and the thread goes on serving the next ones.

Does not know: HTTP or text (it deals in token ids); metrics only through
:class:`ServerMetrics`.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from speculab.engine import Engine
from speculab.logprobs import TokenLogprob
from speculab.request import Request, TokenEvent
from speculab.sampling import SamplingParams
from speculab.serve.metrics import ServerMetrics
from speculab.speculative.stats import SpecStats

log = logging.getLogger("speculab.serve")


class QueueFull(RuntimeError):
    pass


@dataclass(frozen=True)
class Output:
    """New tokens of one request from one step; ``finish_reason`` is set on its last output."""

    token_ids: list[int]
    finish_reason: str | None = None
    error: str | None = None
    logprobs: list[TokenLogprob] | None = None  # one a token, where the request asked for them


@dataclass
class Handle:
    """One request as the event loop sees it."""

    prompt_ids: list[int]
    params: SamplingParams
    outputs: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrival_time: float = field(default_factory=time.perf_counter)
    request: Request | None = None  # set by the engine thread when it takes the request
    finished: bool = False
    _seen: SpecStats = field(default_factory=SpecStats)  # the stats already counted in the metrics
    _last_token_time: float | None = None

    @property
    def stats(self) -> SpecStats:
        return self.request.stats if self.request is not None else SpecStats()


class EngineWorker:
    def __init__(self, engine: Engine, metrics: ServerMetrics, max_queue: int):
        self.engine, self.metrics, self.max_queue = engine, metrics, max_queue
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self._in_system = 0  # submitted and not finished; changed on the event loop only
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="speculab-engine", daemon=True)
        self._ready = threading.Event()  # set once the event loop is known
        self._by_request: dict[int, Handle] = {}
        self._outbox: list[tuple[Handle, Output]] = []  # outputs of the current step, engine thread only

    # -- the event loop's side -------------------------------------------------------------
    def start(self, own_thread: bool = True) -> None:
        """Called on the event loop. ``own_thread=False``: the caller runs :meth:`run` in a thread of its own choosing
        (``speculab serve`` uses the main thread, where the model was loaded: a second thread computing with torch
        gets a second OpenMP team, which on a small CPU competes with the first for the cores)."""
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        if own_thread:
            self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def run(self, should_stop=lambda: False) -> None:
        """The engine loop in the calling thread, once the event loop has called :meth:`start`, until :meth:`stop`
        or ``should_stop()``."""
        while not self._ready.wait(timeout=0.5):
            if should_stop():
                return
        self._run(should_stop)

    def submit(self, prompt_ids: list[int], params: SamplingParams) -> Handle:
        """Queue a request: ValueError when ``engine.check_request`` refuses it (it reads only the engine's settings,
        so any thread may ask), QueueFull when every slot and queue place is taken."""
        self.engine.check_request(prompt_ids, params)
        if self._in_system >= self.engine.max_batch + self.max_queue:
            raise QueueFull(
                f"the server is full: {self.engine.max_batch} requests running and {self.max_queue} waiting "
                "(--max-batch, --max-queue); retry later"
            )
        handle = Handle(list(prompt_ids), params)
        self._in_system += 1
        self._commands.put(("add", handle, None))
        self._wake.set()
        return handle

    def abort(self, handle: Handle, reason: str = "abort") -> None:
        """Stop a request (client gone: "abort"; a stop string matched: "stop"); its slot is free at the next step."""
        if not handle.finished:
            self._commands.put(("abort", handle, reason))
            self._wake.set()

    def _deliver(self, handle: Handle, output: Output) -> None:
        if handle.finished:
            return
        if output.finish_reason is not None or output.error is not None:
            handle.finished = True
            self._in_system -= 1
        handle.outputs.put_nowait(output)

    # -- the engine thread ----------------------------------------------------------------------
    def _send(self, handle: Handle, output: Output) -> None:
        self._outbox.append((handle, output))

    def _flush(self) -> None:
        """Hand a step's outputs to the event loop in one wake-up: on a small CPU, every wake-up of the server's
        other thread takes a core from the engine's compute threads."""
        if self._outbox:
            batch, self._outbox = self._outbox, []
            self._loop.call_soon_threadsafe(self._deliver_all, batch)

    def _deliver_all(self, batch: list[tuple[Handle, Output]]) -> None:
        for handle, output in batch:
            self._deliver(handle, output)

    def _run(self, should_stop=lambda: False) -> None:
        while not self._stop and not should_stop():
            self._apply_commands()
            self._flush()
            if not self.engine.has_work:
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                events = self.engine.step()
            except Exception as err:  # noqa: BLE001  one bad step must not end the server
                log.exception("engine step failed; failing the requests it held")
                self._fail_all(f"internal error in the engine step: {type(err).__name__}: {err}")
                self._flush()
                continue
            now = time.perf_counter()
            for event in events:
                self._on_event(self._by_request[event.request.id], event, now)
            self._set_gauges()
            self._flush()

    def _apply_commands(self) -> None:
        while True:
            try:
                kind, handle, reason = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                self._add(handle)
            elif handle.request is not None and not handle.request.finished:
                self.engine.abort(handle.request)
                self._finish(handle, reason, time.perf_counter())
            self._set_gauges()

    def _add(self, handle: Handle) -> None:
        """Hand a request to the engine; if the engine refuses it, that request alone fails."""
        try:
            handle.request = self.engine.add_request(handle.prompt_ids, handle.params)
        except Exception as err:  # noqa: BLE001  the route checked it first; whatever slips through fails it alone
            log.exception("the engine refused a request")
            self._fail(handle, f"the engine refused the request: {type(err).__name__}: {err}")
            return
        self._by_request[handle.request.id] = handle

    def _on_event(self, handle: Handle, event: TokenEvent, now: float) -> None:
        request, token_ids = event.request, event.token_ids
        if request.finish_reason == "error":  # this request alone failed in the engine
            log.error("request %d failed in the engine: %s", request.id, request.error)
            self._fail(handle, f"internal error in the engine: {request.error}")
            return
        m = self.metrics
        if handle._last_token_time is None:  # the prefill's token
            m.prompt_tokens.inc(len(request.prompt_ids))
            if self.engine.prompt_cache is not None:
                m.prefix_queries.inc(len(request.prompt_ids))
                m.prefix_hits.inc(request.cached_tokens)
                m.prompt_cache(self.engine.prompt_cache)
            m.ttft.observe(now - handle.arrival_time)
            m.queue.observe((request.admitted_time or now) - handle.arrival_time)
        elif token_ids:
            m.itl.observe(now - handle._last_token_time)
        handle._last_token_time = now
        m.generation_tokens.inc(len(token_ids))
        m.add_spec(request.stats.since(handle._seen))
        handle._seen = copy.deepcopy(request.stats)
        self._send(handle, Output(list(token_ids), logprobs=event.logprobs))
        if request.finished:
            self._finish(handle, request.finish_reason, now)

    def _finish(self, handle: Handle, reason: str, now: float) -> None:
        self._by_request.pop(handle.request.id, None)
        self.metrics.finished(reason)
        self.metrics.e2e.observe(now - handle.arrival_time)
        self._send(handle, Output([], finish_reason=reason))

    def _fail_all(self, message: str) -> None:
        for handle in list(self._by_request.values()):
            self.engine.abort(handle.request)
            self._fail(handle, message)
        self._set_gauges()

    def _fail(self, handle: Handle, message: str) -> None:
        """End one request with an error: counted, forgotten, and its client told."""
        if handle.request is not None:
            self._by_request.pop(handle.request.id, None)
        self.metrics.finished("error")
        self._send(handle, Output([], error=message))

    def _set_gauges(self) -> None:
        self.metrics.running.set(len(self.engine.running) + (self.engine.prefilling is not None))  # vLLM counts a prefill as running
        self.metrics.waiting.set(len(self.engine.waiting))
