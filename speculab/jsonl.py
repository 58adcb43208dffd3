"""Append-only JSONL files that a kill may cut: reading back every complete record."""

from __future__ import annotations

import json
from pathlib import Path


def read_records(path: Path) -> list[dict]:
    """Every parseable line of ``path`` (none if it does not exist); a line cut mid-write is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
