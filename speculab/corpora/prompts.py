"""Coding prompts made from real source files: code windows and task templates.

Knows: how to cut a source file into top-level blocks and pick a window of
them near a number of tokens, and the instruction templates of each domain
(refactor, unit tests, schema, query, …). Both the benchmark workload and the
trainer's data come from here, so they ask the same kinds of questions of
disjoint files.

Does not know: where files come from (``sources``) or which model answers.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from speculab.corpora.sources import SourceFile

FENCE = {"python": "python", "typescript": "ts", "sql": "sql"}

TEMPLATES: dict[str, dict[str, str]] = {
    "python": {
        "refactor": "Refactor this function and the code around it from `{path}` ({source}) for readability: "
        "keep the behaviour identical, add type hints, and explain each change briefly.\n\n{code}",
        "unit-tests": "Write unit tests with pytest for the following code from `{path}` ({source}). "
        "Cover normal cases, edge cases and errors.\n\n{code}",
        "docstrings": "Add complete docstrings (Google style) to every function and class in this code from "
        "`{path}` ({source}), then return the full code.\n\n{code}",
    },
    "typescript": {
        "refactor": "Refactor this TypeScript code from `{path}` ({source}) to be more readable and strictly typed, "
        "without changing its behaviour. Return the refactored code.\n\n{code}",
        "unit-tests": "Write unit tests with Vitest for the following TypeScript code from `{path}` ({source}). "
        "Cover normal cases, edge cases and errors.\n\n{code}",
        "types": "Explain the types and the public API declared in this TypeScript code from `{path}` ({source}), "
        "then write a short usage example for each exported item.\n\n{code}",
    },
    "sql": {
        "schema": "Here are SQL statements from PostgreSQL's regression test `{path}` ({source}). Implement the "
        "SQL schema for the data they use: CREATE TABLE statements with primary keys, foreign keys, "
        "constraints and indexes, for PostgreSQL.\n\n{code}",
        "query": "Here are SQL statements from PostgreSQL's regression test `{path}` ({source}). Write five new "
        "queries over the same tables that test the same features, each with a comment saying what "
        "it checks.\n\n{code}",
        "refactor": "Refactor these SQL statements from PostgreSQL's regression test `{path}` ({source}) for "
        "readability: consistent formatting, explicit joins and column lists, and comments.\n\n{code}",
    },
}


@dataclass(frozen=True)
class Window:
    code: str
    num_tokens: int  # of the code alone, target tokenizer


def top_level_blocks(text: str) -> list[str]:
    """Split at lines that start a top-level statement after a blank line (def, class, CREATE, export …)."""
    lines = text.splitlines(keepends=True)
    blocks: list[list[str]] = [[]]
    previous_blank = True
    for line in lines:
        starts_block = line[:1] not in ("", " ", "\t", "\n", "\r", ")", "}", "]") and previous_blank
        if starts_block and blocks[-1]:
            blocks.append([])
        blocks[-1].append(line)
        previous_blank = not line.strip()
    return ["".join(b) for b in blocks if "".join(b).strip()]


def pick_window(text: str, count_tokens: Callable[[str], int], rng: random.Random, min_tokens: int, max_tokens: int) -> Window | None:
    """A run of consecutive top-level blocks of min..max tokens, from a random start; None if the file is too short."""
    blocks = top_level_blocks(text)
    sizes = [count_tokens(b) for b in blocks]
    if sum(sizes) < min_tokens:
        return None
    starts = list(range(len(blocks)))
    rng.shuffle(starts)
    for start in starts:
        total, end = 0, start
        while end < len(blocks) and total + sizes[end] <= max_tokens:
            total += sizes[end]
            end += 1
        if total >= min_tokens:
            return Window("".join(blocks[start:end]).strip("\n") + "\n", total)
    return _truncated_window(text, count_tokens, rng, min_tokens, max_tokens)


def _truncated_window(text, count_tokens, rng, min_tokens, max_tokens) -> Window | None:
    """Fallback for files made of few huge blocks: whole lines from a random line start."""
    lines = text.splitlines(keepends=True)
    start = rng.randrange(max(1, len(lines) // 2))
    chosen, total = [], 0
    for line in lines[start:]:
        n = count_tokens(line)
        if total + n > max_tokens:
            break
        chosen.append(line)
        total += n
    return Window("".join(chosen).strip("\n") + "\n", total) if total >= min_tokens else None


def code_prompt(file: SourceFile, task: str, window: Window) -> str:
    domain = file.source.domain
    path = file.path.removeprefix("package/")
    code = f"```{FENCE[domain]}\n{window.code}```"
    return TEMPLATES[domain][task].format(path=path, source=file.source.label, code=code)
