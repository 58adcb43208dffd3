"""The context file pool: whole repository files that lengthen the benchmark's prompts, and its loader.

A coding agent sends whole files of its repository before its request. The benchmark's context-length axis does the
same with this pool: per language (``python``, ``typescript``, ``sql``), whole files from the benchmark share of the
pinned sources (``sources.is_benchmark_file``) that the shipped workload's own prompts never quote, each between
``LEAST_TOKENS`` and ``most_tokens(domain)`` tokens of the embedded tokenizer (a plain ``encode`` of the text, no chat
template), none that reads as data (long or minified lines, a generated-file header, control characters, tables of
numbers, text that was not valid UTF-8). Each domain's files are drawn in an order shuffled from ``SEED`` until they
hold ``FILL_TOKENS``, so the pool is byte-identical run to run. Build it with ``python -m
speculab.corpora.context_files`` (``--check`` rebuilds it in memory and compares with the shipped files instead).

Knows: which files make the pool, its file format (``context_files.jsonl``, one file a line, and
``context_files.sources.json``, the seed, Python and sources it came from) and how to read it back
(``load_context_files``, which imports nothing heavy: the tokenizer is imported only to build).
Does not know: how a prompt is lengthened with these files (``speculab.bench.contexts``), and cannot make a domain
hold more than its benchmark share offers: PostgreSQL's regression SQL has few files of that size the workload does
not quote, so ``sql`` holds fewer than ``NEEDED_TOKENS`` (the build says so).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from speculab.corpora.sources import SOURCES, Source, SourceFile, is_benchmark_file, iter_files, source_record

CONTEXT_FILES = Path(__file__).resolve().parent.parent / "bench" / "workload_files" / "context_files.jsonl"
SEED = 20261207
DOMAINS = tuple(sorted({s.domain for s in SOURCES}))  # python, sql, typescript: the pool's order
LEAST_TOKENS, MOST_TOKENS = 250, 2_500  # a file's size, embedded-tokenizer tokens
# pglast's benchmark share holds 17 SQL files the workload does not quote, most of them long: SQL takes files of up to
# this many tokens (a short context quotes the head of one), or it would hold 9 files and 7.6k tokens
MOST_TOKENS_OF = {"sql": 8_000}
FILL_TOKENS = 60_000  # a domain's files are drawn until they hold this many (so at most FILL_TOKENS + MOST_TOKENS)
NEEDED_TOKENS = 48_000  # what a 16-prompt run at 8k context needs to start each prompt at its own file
LONG_LINE = 200  # characters; a file with a tenth of its text in longer lines of code reads as data or minified code
COMMENT = ("#", "//", "/*", "*", "--")
GENERATED = re.compile(r"auto-?matically[ -]generated|auto-?generated|generated (by|from|with)|do not edit", re.IGNORECASE)
PREAMBLE = "Files from the repository I am working in:\n\n"  # what quotes the files before an agent's request
FENCES = {"python": "python", "typescript": "typescript", "sql": "sql"}
CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")  # tab, newlines and form feed are text


class ContextFileError(ValueError):
    pass


@dataclass(frozen=True)
class ContextFile:
    id: str  # <domain>-NNN
    domain: str  # python | typescript | sql
    path: str  # inside its package (npm's package/ and an sdist's top folder left off)
    source: str  # <name>@<version>
    license: str  # SPDX id
    tokens: int  # of the embedded tokenizer, the text alone
    text: str  # the whole file


def load_context_files(path: str | Path | None = None) -> dict[str, list[ContextFile]]:
    """The pool at ``path`` (the shipped one when None): domain -> its files, in the pool's order."""
    path = Path(path) if path else CONTEXT_FILES
    if not path.is_file():
        raise ContextFileError(f"{path}: no such context file pool")
    pool: dict[str, list[ContextFile]] = {}
    seen: set[str] = set()
    for number, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ContextFileError(f"{where}: not valid UTF-8") from None
        except json.JSONDecodeError as e:
            raise ContextFileError(f"{where}: not valid JSON ({e.msg})") from None
        file = _context_file(record, where)
        if file.id in seen:
            raise ContextFileError(f"{where}: duplicate id {file.id!r}")
        seen.add(file.id)
        pool.setdefault(file.domain, []).append(file)
    if not pool:
        raise ContextFileError(f"{path}: the pool holds no files")
    return pool


def _context_file(record: object, where: str) -> ContextFile:
    if not isinstance(record, dict):
        raise ContextFileError(f"{where}: a record must be a JSON object")
    values = {}
    for field in fields(ContextFile):
        value = record.get(field.name)
        if field.type == "int":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ContextFileError(f"{where}: {field.name!r} must be a positive whole number")
        elif not isinstance(value, str) or not value:
            raise ContextFileError(f"{where}: {field.name!r} must be a non-empty string")
        values[field.name] = value
    return ContextFile(**values)


def quote_file(file: ContextFile, text: str, lines: int | None = None, of: int | None = None) -> str:
    """``text`` of ``file`` (all of it, or its first ``lines`` of ``of``) fenced as an agent quotes it after ``PREAMBLE``."""
    part = f" (lines 1-{lines} of {of})" if lines is not None else ""
    return f"`{file.path}` from {file.source}{part}:\n```{FENCES.get(file.domain, '')}\n{text.rstrip()}\n```\n\n"


def sources_path(pool: Path) -> Path:
    """Where the provenance of the pool at ``pool`` lies (``context_files.sources.json`` beside it)."""
    return pool.with_name(f"{pool.stem}.sources.json")


def data_reason(text: str) -> str | None:
    """Why ``text`` reads as data rather than code a person wrote (None when it reads as code)."""
    if "\ufffd" in text:
        return "not valid UTF-8"  # iter_files decodes with errors="replace"
    if CONTROL.search(text):
        return "control characters (binary-looking)"
    lines = text.splitlines() or [""]
    code = [x for x in lines if not x.lstrip().startswith(COMMENT)]  # a long comment is prose, not data
    if max(map(len, code), default=0) > 5 * LONG_LINE or sum(len(x) for x in code if len(x) > LONG_LINE) > len(text) / 10:
        return "long lines (minified or data)"
    if GENERATED.search("\n".join(lines[:10])):
        return "a generated-file header"
    visible = [c for c in text if not c.isspace()]
    if sum(c.isdigit() for c in visible) > len(visible) / 4:
        return "mostly numbers (a data table)"
    return None


def archive_root(source: Source) -> str:
    """The folder an archive holds its package in ("" for the stdlib, read from the interpreter's own folder)."""
    return {"stdlib": "", "npm": "package/", "pypi": f"{source.name}-{source.version}/"}[source.registry]


def package_path(file: SourceFile) -> str:
    return file.path.removeprefix(archive_root(file.source))


def benchmark_files(domain: str) -> list[SourceFile]:
    """The domain's files in the benchmark share, source by source in SOURCES' order, each in path order."""
    return [f for s in SOURCES if s.domain == domain for f in iter_files(s) if is_benchmark_file(f.file_id)]


def quoted_by_workload(workload: Path) -> set[str]:
    """The file ids the workload's prompts quote (its records' ``source``)."""
    return {json.loads(line)["source"] for line in workload.read_text(encoding="utf-8").split("\n") if line.strip()}


def most_tokens(domain: str) -> int:
    """The largest file a domain's pool takes, in tokens."""
    return MOST_TOKENS_OF.get(domain, MOST_TOKENS)


def draw(files: list[SourceFile], count: Callable[[str], int], most: int = MOST_TOKENS) -> list[tuple[SourceFile, int]]:
    """``files`` in their order, those of LEAST_TOKENS to ``most`` tokens, until they hold FILL_TOKENS."""
    drawn, held = [], 0
    for file in files:
        if held >= FILL_TOKENS:
            break
        tokens = count(file.text)
        if LEAST_TOKENS <= tokens <= most:
            drawn.append((file, tokens))
            held += tokens
    return drawn


def build(count: Callable[[str], int], quoted: set[str], files: dict[str, list[SourceFile]] | None = None) -> list[dict]:
    """The pool's records: each domain's files (``files``, else its benchmark share) that ``quoted`` leaves out and
    that read as code, shuffled from SEED and drawn until they hold FILL_TOKENS; ``count`` gives a text's tokens."""
    rng = random.Random(SEED)
    records = []
    for domain in DOMAINS:
        candidates = files[domain] if files is not None else benchmark_files(domain)
        fresh = [f for f in candidates if f.file_id not in quoted and data_reason(f.text) is None]
        rng.shuffle(fresh)
        for number, (file, tokens) in enumerate(draw(fresh, count, most_tokens(domain)), 1):
            records.append(
                {
                    "id": f"{domain}-{number:03d}",
                    "domain": domain,
                    "path": package_path(file),
                    "source": file.source.label,
                    "license": file.source.spdx_id,
                    "tokens": tokens,
                    "text": file.text,
                }
            )
    return records


def short_domains(records: list[dict]) -> dict[str, int]:
    """The domains that hold fewer than NEEDED_TOKENS, and what they hold."""
    held = {d: sum(r["tokens"] for r in records if r["domain"] == d) for d in DOMAINS}
    return {d: tokens for d, tokens in held.items() if tokens < NEEDED_TOKENS}


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def sources_json(records: list[dict]) -> str:
    used = {r["source"] for r in records}
    sources = {s.label: source_record(s) | {"spdx": s.spdx_id} for s in SOURCES if s.label in used}
    return json.dumps({"seed": SEED, "python": platform.python_version(), "sources": sources}, indent=1) + "\n"


def first_difference(shipped: bytes, fresh: str) -> str:
    """Where ``shipped`` first differs from ``fresh``: its line (and the id on it) or its length."""
    old, new = shipped.decode("utf-8", errors="replace").split("\n"), fresh.split("\n")
    for number, (a, b) in enumerate(zip(old, new), 1):
        if a != b:
            found = re.search(r'"id": "([^"]+)"', b) or re.search(r'"id": "([^"]+)"', a)
            return f"line {number}" + (f" ({found.group(1)})" if found else "")
    return f"{len(old)} lines where a fresh build has {len(new)}"


def check(outputs: dict[Path, str], builder: str = "python -m speculab.corpora.context_files", what: str = "the context file pool") -> int:
    """0 when every file in ``outputs`` holds exactly its text; else 1, naming each that differs and where
    (``builder``: the command that writes them; ``what``: what they are)."""
    differ = 0
    for path, text in outputs.items():
        if not path.is_file():
            print(f"{path}: missing; {builder} writes it", file=sys.stderr)
        elif path.read_bytes() != text.encode("utf-8"):
            where = first_difference(path.read_bytes(), text)
            print(f"{path}: differs from a fresh build at {where}; {builder} rewrites it", file=sys.stderr)
        else:
            continue
        differ = 1
    print("identical" if not differ else f"{what} differs from a fresh build")
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CONTEXT_FILES, help="the pool (its .sources.json is written beside it)")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)

    # imported here, not above: the loader stays free of torch and the tokenizer
    from speculab.corpora.build_workload import WORKLOAD_PATH
    from speculab.models.embedded import ensure_embedded_model
    from speculab.models.tokenizer import Tokenizer

    tokenizer = Tokenizer(ensure_embedded_model())
    records = build(lambda text: len(tokenizer.encode(text)), quoted_by_workload(WORKLOAD_PATH))
    for domain, tokens in short_domains(records).items():
        print(f"{domain}: {tokens:,} tokens, fewer than {NEEDED_TOKENS:,}: its benchmark share has no more files that fit", file=sys.stderr)
    outputs = {args.out: dumps(records), sources_path(args.out): sources_json(records)}
    if args.check:
        return check(outputs)
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
    held = {d: (sum(r["domain"] == d for r in records), sum(r["tokens"] for r in records if r["domain"] == d)) for d in DOMAINS}
    print(f"wrote {args.out}: " + ", ".join(f"{d} {n} files {t:,} tokens" for d, (n, t) in held.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
