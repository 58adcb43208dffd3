"""Benchmark workloads: the shipped 100 coding prompts, or any user JSONL.

Knows: the record schema (``id``, ``domain``, ``task`` and ``messages``; or a
plain ``prompt`` string, which becomes one user message; or a ``session``: an
agent's conversation ending with a request, which becomes one item per turn, each
the conversation up to that turn's request, id ``ID/turn-N``), the shipped
sessions by name (``sessions``: ``corpora/sessions.py`` makes them), validation with
errors that name the file and line, and how a record becomes target token ids
(through the target's chat template). Does not know: how prompts are run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent / "workload_files" / "workload.jsonl"
NAMED = {"sessions": SHIPPED.with_name("sessions.jsonl")}  # --workload NAME: a shipped workload besides the default
DOMAINS = ("python", "typescript", "sql", "agentic")
ROLES = ("system", "user", "assistant")


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True)
class WorkloadItem:
    id: str
    domain: str  # python | typescript | sql, or any label a user workload gives ("other" when absent)
    task: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    language: str = ""  # the code's language (an agentic conversation's ``language``; else its domain)

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def _items(record: object, where: str) -> list[WorkloadItem]:
    """A record's items: one, or a session's turns."""
    if not isinstance(record, dict) or "session" not in record:
        return [_item(record, where)]
    messages = record["session"]
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages] if isinstance(messages, list) else []
    turns = [n for n, role in enumerate(roles) if role == "user"]
    if not turns or roles[-1] != "user" or any(a == b for a, b in zip(roles, roles[1:])):
        raise WorkloadError(f"{where}: 'session' must be a list of messages, user and assistant in turn, ending with a user request")
    base = {k: v for k, v in record.items() if k != "session"}
    return [
        _item(base | {"messages": messages[: n + 1], "id": f"{record.get('id', where.rsplit(':', 1)[-1])}/turn-{k}"}, where)
        for k, n in enumerate(turns, 1)
    ]


def _item(record: object, where: str) -> WorkloadItem:
    if not isinstance(record, dict):
        raise WorkloadError(f"{where}: a record must be a JSON object")
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages:
            raise WorkloadError(f"{where}: 'messages' must be a non-empty list")
        pairs = []
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise WorkloadError(f"{where}: each message needs a 'role' in {ROLES} and a string 'content'")
            pairs.append((m["role"], m["content"]))
    elif isinstance(record.get("prompt"), str) and record["prompt"].strip():
        pairs = [("user", record["prompt"])]
    else:
        raise WorkloadError(f"{where}: needs 'messages' (a list of role/content) or a non-empty 'prompt' string")
    for field in ("id", "domain", "task"):
        if field in record and not isinstance(record[field], str):
            raise WorkloadError(f"{where}: '{field}' must be a string")
    domain = record.get("domain", "other")
    language = record.get("language", domain)
    if not isinstance(language, str):
        raise WorkloadError(f"{where}: 'language' must be a string")
    return WorkloadItem(record.get("id", where.rsplit(":", 1)[-1]), domain, record.get("task", "other"), tuple(pairs), language)


def load_workload(path: str | Path | None = None) -> list[WorkloadItem]:
    path = Path(path) if path else SHIPPED
    if not path.is_file() and str(path) in NAMED:  # a file of that name comes first
        path = NAMED[str(path)]
    if not path.is_file():
        raise WorkloadError(f"{path}: no such workload file")
    items, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkloadError(f"{where}: not valid JSON ({e.msg})") from None
        if isinstance(record, dict) and "id" not in record:
            record = {**record, "id": f"line-{number}"}
        for item in _items(record, where):
            if item.id in seen:
                raise WorkloadError(f"{where}: duplicate id {item.id!r}")
            seen.add(item.id)
            items.append(item)
    if not items:
        raise WorkloadError(f"{path}: the workload is empty")
    return items


def interleave_domains(items: list[WorkloadItem], n: int) -> list[WorkloadItem]:
    """The first ``n`` prompts taking the domains in turn, so a small run still covers each language."""
    by_domain: dict[str, list[WorkloadItem]] = {}
    for item in items:
        by_domain.setdefault(item.domain, []).append(item)
    picked: list[WorkloadItem] = []
    queues = list(by_domain.values())
    while len(picked) < min(n, len(items)):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return picked
