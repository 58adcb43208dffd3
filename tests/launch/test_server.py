"""EngineServer: a real child server (`speculab serve` on a tiny model) started, found healthy, paused, resumed and
stopped; a server that dies or never gets healthy is an error quoting its log."""

from __future__ import annotations

import sys

import httpx
import pytest
from packaging.version import Version

from speculab.launch.command import Flag, LaunchCommand
from speculab.launch.server import EngineServer
from tests.helpers import save_tiny_checkpoint
from tests.servers import free_port


def _command(program: tuple[str, ...], port: int, flags=()) -> LaunchCommand:
    return LaunchCommand(
        "speculab",
        Version("0.0"),
        program,
        tuple(flags),
        (Flag("SPECULAB_TEST_MARK", "1", "shown in the log"),),
        port=port,
        served_name="tiny",
    )


def test_starts_a_real_server_waits_for_health_and_stops_it(tmp_path):
    model = save_tiny_checkpoint(tmp_path / "tiny")
    port = free_port()
    program = (sys.executable, "-m", "speculab.cli", "serve", "--model", str(model), "--dtype", "float32")
    command = _command(program, port, [Flag("--port", str(port), "a free port")])
    log = tmp_path / "run" / "server.log"
    with EngineServer(command, log, startup_timeout=120, progress=False) as server:
        assert httpx.get(f"{command.url}/health", timeout=5).status_code == 200
        process = server.process
        assert log.read_text().startswith("$ SPECULAB_TEST_MARK=1 ")  # the log opens with the command as run
        with pytest.raises(RuntimeError, match="already answers"):  # a second server on the same port is refused
            EngineServer(command, tmp_path / "second.log", progress=False).start()
        server.pause()  # frozen: it answers nothing until resumed, then as before
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"{command.url}/health", timeout=1)
        server.resume()
        assert httpx.get(f"{command.url}/health", timeout=5).status_code == 200
        server.pause()
        with pytest.raises(ValueError), server.taking_turn():  # a turn resumes it, and pauses it again even when it fails
            assert httpx.get(f"{command.url}/health", timeout=5).status_code == 200
            raise ValueError
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"{command.url}/health", timeout=1)  # a paused server still stops on leaving
    assert process.poll() is not None
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{command.url}/health", timeout=2)


def test_a_server_that_exits_is_an_error_quoting_its_log(tmp_path):
    program = (sys.executable, "-c", "import sys; print('loading weights'); print('ValueError: no such flag --bogus'); sys.exit(3)")
    with pytest.raises(RuntimeError, match=r"exited with 3(.|\n)*no such flag --bogus"):
        EngineServer(_command(program, free_port()), tmp_path / "server.log", progress=False).start()


def test_a_server_that_never_gets_healthy_is_stopped(tmp_path):
    program = (sys.executable, "-c", "import time; print('waiting forever'); time.sleep(600)")
    server = EngineServer(_command(program, free_port()), tmp_path / "server.log", startup_timeout=2, progress=False)
    with pytest.raises(RuntimeError, match=r"not healthy after 2 s(.|\n)*waiting forever"):
        server.start()
    assert server.process is None  # stopped, its process group killed
