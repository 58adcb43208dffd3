"""Real `speculab serve` processes on loopback, started once per module; every wait is bounded (fixtures, registered in tests/conftest.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx
import pytest

MODEL = "SmolLM2-135M-Instruct"
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    log: str

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"


def start_server(tmp_path_factory, *args: str) -> Server:
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "speculab.cli", "serve", "--port", str(port), "--dtype", "float32", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"speculab serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return Server(url, process, str(log))
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"speculab serve did not answer /health in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="module")
def eagle_server(tmp_path_factory):
    """The embedded model with the shipped EAGLE head: 16 slots, 64 waiting places."""
    server = start_server(tmp_path_factory, "--method", "eagle", "--max-batch", "16", "--max-queue", "64", "--max-model-len", "1024")
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def one_slot_server(tmp_path_factory):
    """One slot, no waiting place, an API key: for 429, disconnects and 401; its KV cache in bf16 (the real model on it)."""
    server = start_server(
        tmp_path_factory, "--max-batch", "1", "--max-queue", "0", "--max-model-len", "4096", "--api-key", "sekret", "--kv-dtype", "bfloat16"
    )
    yield server
    stop_server(server)
