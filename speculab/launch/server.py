"""One engine server as a child process: start it, wait for ``/health``, stop it cleanly.

Knows: the command's argv and environment, a log file that takes everything the server prints,
polling ``/health`` until it answers 200 (progress shown, bounded in time), and stopping the
whole process group (SIGINT, then SIGTERM, then SIGKILL; vLLM runs three processes), pausing and resuming it
(SIGSTOP, SIGCONT) so that servers side by side take turns. A server
that exits or never gets healthy is an error that quotes the last lines of its log. Used as a
context manager, the server stops on leaving it, Ctrl-C included.

Does not know: which flags (``vllm.py``, ``sglang.py``) or what is measured (``speculab.bench``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from tqdm import tqdm

from speculab.launch.command import LaunchCommand


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class EngineServer:
    def __init__(self, command: LaunchCommand, log: Path, startup_timeout: float = 600.0, progress: bool = True):
        self.command, self.log, self.startup_timeout, self.progress = command, Path(log), startup_timeout, progress
        self.process: subprocess.Popen | None = None

    def start(self) -> EngineServer:
        self._refuse_busy_port()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            out.write(f"$ {self.command.shell()}\n")
            out.flush()
            self.process = subprocess.Popen(
                self.command.argv,
                env=os.environ | self.command.environment,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _refuse_busy_port(self) -> None:
        try:
            httpx.get(f"{self.command.url}/health", timeout=2.0)
        except httpx.HTTPError:
            return
        raise RuntimeError(f"{self.command.url}: something already answers on port {self.command.port}; pick another --port")

    def _wait_healthy(self) -> None:
        start = time.monotonic()
        desc = f"starting {self.command.engine} {self.command.version}"
        with tqdm(desc=desc, unit="s", bar_format="{desc}: {elapsed}", disable=not self.progress) as bar:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"{self.command.engine} exited with {self.process.returncode} before it was healthy; "
                        f"the end of {self.log}:\n{log_tail(self.log)}"
                    )
                if self._healthy():
                    return
                if time.monotonic() - start > self.startup_timeout:
                    raise RuntimeError(
                        f"{self.command.engine} was not healthy after {self.startup_timeout:.0f} s; "
                        f"the end of {self.log}:\n{log_tail(self.log)}"
                    )
                time.sleep(1.0)
                bar.update(1)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.command.url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def pause(self) -> None:
        """Freeze the server and its workers (SIGSTOP to its process group): it keeps its memory and computes nothing,
        so a server beside it is measured as if alone. Only while no request is in flight."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    @contextmanager
    def taking_turn(self) -> Iterator[EngineServer]:
        """Resumed for one turn of servers side by side, paused again after it (a failed turn too)."""
        self.resume()
        try:
            yield self
        finally:
            self.pause()

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)

    def stop(self, grace: float = 30.0) -> int | None:
        """Stop the server and its children (a paused one is resumed first, to hear it); returns its exit code."""
        self.resume()
        process, self.process = self.process, None
        if process is None:
            return None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if process.poll() is not None:
                break
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=grace if sig != signal.SIGKILL else None)
            except subprocess.TimeoutExpired:
                continue
        try:  # workers left in the group (vLLM's engine core) go too
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return process.returncode

    def __enter__(self) -> EngineServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
