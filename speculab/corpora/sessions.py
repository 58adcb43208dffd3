"""Multi-turn agent sessions: a repository's files, then turn after turn of edits, each resending everything so far.

A coding agent works in turns: its first request comes after whole files of the repository, and every later request
resends the conversation so far (files, its earlier requests, the model's answers) with a new instruction. Turn n+1's
prompt extends turn n's, which is what a server's prefix reuse serves. Each session here quotes whole files of one
language from the context pool (``context_files``) up to ``CONTEXT_TOKENS``, then asks, turn after turn, to rename
an identifier in one of them (the files in turn, each the latest version of itself) and return the whole file. The
earlier answers are the renames done exactly (``agentic.renamed``), so no model is in the loop and the file is
byte-identical run to run; the model's own answer is asked for at every turn's end. A session stops before a turn
whose prompt would pass ``MOST_PROMPT_TOKENS`` of the embedded model's chat template (room for the output within its
8,192 positions). Build with ``python -m speculab.corpora.sessions`` (``--check`` compares with the shipped file).

Knows: how a session is made from the pool and its record (``session``: the messages, ending with a user turn;
``files``: what it quotes, with sources and licenses). Does not know: how a session becomes one workload item per turn
(``speculab.bench.workload``) or how turns are served. Python and TypeScript only: the rename's identifiers are found
with those languages' keywords (``agentic.identifier``); SQL has no such list here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from speculab.corpora.agentic import new_name, ranked_identifiers, renamed
from speculab.corpora.context_files import PREAMBLE, ContextFile, check, dumps, load_context_files, quote_file

SESSIONS = Path(__file__).resolve().parent.parent / "bench" / "workload_files" / "sessions.jsonl"
LANGUAGES = ("python", "typescript")
SESSIONS_PER_LANGUAGE = 4
TURNS = 6  # at most; fewer where the prompt would outgrow MOST_PROMPT_TOKENS
CONTEXT_TOKENS = 2_400  # the files quoted before the first request (a plain encode of each file's text)
MOST_PROMPT_TOKENS = 7_600  # a turn's prompt with the chat template: room for 512 tokens out within 8,192 positions


def session_files(pool: list[ContextFile], start: int) -> list[ContextFile]:
    """Whole files from ``pool[start:]`` while they hold ``CONTEXT_TOKENS`` (at least two)."""
    files, held = [], 0
    for file in pool[start:]:
        if len(files) >= 2 and held + file.tokens > CONTEXT_TOKENS:
            break
        files.append(file)
        held += file.tokens
    return files


def session_messages(files: list[ContextFile], count: Callable[[list[dict]], int]) -> list[dict]:
    """The session's messages: the files and the first request, then answer and request in turn, ending with a request
    (``count``: a conversation's prompt tokens)."""
    code = {f.id: f.text for f in files}
    renamed_to: set[str] = set()
    messages: list[dict] = []
    answer = ""  # the previous request's answer: its rename, done exactly
    for turn in range(TURNS):
        file = files[turn % len(files)]
        old = next((w for w in ranked_identifiers(code[file.id], file.domain) if w not in renamed_to), None)
        if old is None:
            break
        new = new_name(old, file.domain)
        ask = f"Rename `{old}` to `{new}` throughout `{file.path}`, and return the complete updated file with no other changes."
        head = PREAMBLE + "".join(quote_file(f, f.text) for f in files) if turn == 0 else ""
        after = [{"role": "assistant", "content": answer}] if messages else []
        turn_messages = [*after, {"role": "user", "content": head + ask}]
        if count([*messages, *turn_messages]) > MOST_PROMPT_TOKENS:
            break
        messages += turn_messages
        code[file.id] = renamed(code[file.id], old, new)
        renamed_to.add(new)
        answer = f"Here is `{file.path}` with `{old}` renamed to `{new}`:\n\n{quote_file(file, code[file.id])}"
    return messages


def build(count: Callable[[list[dict]], int], pool: dict[str, list[ContextFile]] | None = None) -> list[dict]:
    """Every session's record, ``SESSIONS_PER_LANGUAGE`` a language, each from the files after the previous one's."""
    pool = load_context_files() if pool is None else pool
    records = []
    for language in LANGUAGES:
        start = 0
        for number in range(1, SESSIONS_PER_LANGUAGE + 1):
            files = session_files(pool[language], start)
            start += len(files)
            messages = session_messages(files, count)
            if sum(m["role"] == "user" for m in messages) < 2:
                continue  # a session is two turns at least
            records.append(
                {
                    "id": f"session-{language}-{number:02d}",
                    "domain": "agentic",
                    "task": "session",
                    "language": language,
                    "files": [{"id": f.id, "path": f.path, "source": f.source, "license": f.license} for f in files],
                    "session": messages,
                }
            )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SESSIONS)
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    from speculab.models.embedded import ensure_embedded_model  # the tokenizer only to build
    from speculab.models.tokenizer import Tokenizer

    tokenizer = Tokenizer(ensure_embedded_model())
    records = build(lambda messages: len(tokenizer.encode_chat(messages)))
    text = dumps(records)
    if args.check:
        return check({args.out: text}, "python -m speculab.corpora.sessions", "the sessions")
    args.out.write_text(text, encoding="utf-8", newline="\n")
    turns = sum(m["role"] == "user" for r in records for m in r["session"])
    print(f"wrote {args.out}: {len(records)} sessions, {turns} turns", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
