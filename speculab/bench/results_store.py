"""``results.jsonl``, the one place a ``speculab bench`` run writes to and the report reads from.

Knows: one JSON object per line, appended and flushed as results arrive; a line cut by a kill is dropped before
the next record; one writer at a time (an advisory lock on the folder, released by the kernel when the process ends,
however it ends); which records a resumed run needs back (its baselines' outputs: the references of greedy identity).
Does not know: what the records hold beyond their kind, run id, label and batch size.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from speculab.bench.margins import LogitMargin
from speculab.jsonl import read_records


class ResultsFile:
    """``results.jsonl``: one JSON object per line, appended and flushed as results arrive."""

    def __init__(self, path: Path):
        self.path = path

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The file's one writer: a second process asking while this one holds it is refused, naming the holder."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        with lock_path.open("a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip() or "unknown"
                raise RuntimeError(
                    f"{self.path.parent} is in use by another speculab bench (pid {holder}): wait for it to end, or pass another --out"
                ) from None
            lock.seek(0)
            lock.truncate()
            lock.write(f"{os.getpid()}\n")
            lock.flush()
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self) -> list[dict]:
        return read_records(self.path)

    def truncate_partial_line(self) -> None:
        """A kill mid-write leaves a line without its newline: cut it, so the next record starts clean."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def append(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


@dataclass
class References:
    """The baselines' outputs a run compares every other cell with, by batch size and context (and engine over HTTP;
    a record written before contexts were measured is at the workload's own, None)."""

    outputs: dict[tuple, list[list[int]]] = field(default_factory=dict)  # (batch size, context) -> token ids per prompt
    margins: dict[tuple, list[list[LogitMargin]]] = field(default_factory=dict)  # (batch size, context) -> per prompt, per token
    texts: dict[tuple, list[str]] = field(default_factory=dict)  # (engine, batch size, context) -> an endpoint baseline's texts

    @classmethod
    def of_run(cls, previous: list[dict], run_id: str) -> References:
        """What a resumed run measured already: it still checks greedy identity against those baselines."""
        found = cls()
        for r in previous:
            if r.get("kind") != "cell" or r.get("run_id") != run_id or r.get("method") != "baseline":
                continue
            at = (r["batch_size"], r.get("context"))
            if "outputs" in r:
                found.outputs[at] = r["outputs"]
                if r.get("logit_margins"):  # records written before margins were kept have none
                    found.margins[at] = [[LogitMargin(*m) for m in ms] for ms in r["logit_margins"]]
            if "output_texts" in r:
                found.texts[(r.get("engine"), *at)] = r["output_texts"]
        return found

    def at_context(self, context: int | None) -> tuple[dict[int, list[list[int]]], dict[int, list[list[LogitMargin]]]]:
        """The in-process baselines' outputs and margins at ``context``, by batch size."""
        outputs = {b: o for (b, c), o in self.outputs.items() if c == context}
        return outputs, {b: m for (b, c), m in self.margins.items() if c == context}

    def engine_texts(self, engine: str | None, context: int | None) -> dict[int, list[str]]:
        """An engine's baseline texts at ``context``, by batch size."""
        return {b: t for (e, b, c), t in self.texts.items() if e == engine and c == context}
