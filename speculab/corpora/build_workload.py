"""Build the benchmark workload: 100 coding prompts and 24 agentic conversations from pinned real code, byte-identically.

Knows: the workload's make-up (34 Python, 33 TypeScript, 33 SQL prompts; the
tasks of each domain; about 1,200 target tokens a prompt) and how to draw it
deterministically from the benchmark share of the sources. Run it with
``python -m speculab.corpora.build_workload`` (``--check`` compares with the shipped
file instead of writing it).

Does not know: how the workload is run (``speculab.bench``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from speculab.corpora.agentic import TASKS as AGENTIC_TASKS
from speculab.corpora.agentic import agentic_messages
from speculab.corpora.prompts import TEMPLATES, code_prompt, pick_window
from speculab.corpora.sources import SOURCES, Source, is_benchmark_file, iter_files, source_record
from speculab.corpora.tpc import TPC_SPECS, TPC_TEMPLATE
from speculab.models.embedded import ensure_embedded_model
from speculab.models.tokenizer import Tokenizer

SEED = 20261130
WORKLOAD_PATH = Path(__file__).resolve().parent.parent / "bench" / "workload_files" / "workload.jsonl"
# (source name, number of prompts); TPC-style schemas fill SQL up to 33
PLAN: tuple[tuple[str, int], ...] = (
    ("cpython-stdlib", 34),
    ("typescript", 9),
    ("rxjs", 8),
    ("zod", 9),
    ("@tanstack/query-core", 7),
    ("pglast", 30),
)
CODE_TOKENS = (850, 1250)  # code window, target tokens; the instruction and chat template add ~60-80
# the agentic slice (corpora/agentic.py): 12 Python and 12 TypeScript conversations from files the 100 do not use,
# drawn after them with their own seed so that the 100 stay as they were; shorter windows, as a second turn repeats one
AGENTIC_PLAN: tuple[tuple[str, int], ...] = (("cpython-stdlib", 12), ("typescript", 4), ("rxjs", 4), ("zod", 4))
AGENTIC_SEED = SEED + 1
AGENTIC_CODE_TOKENS = (400, 650)


def _source(name: str) -> Source:
    return next(s for s in SOURCES if s.name == name)


def _user(content: str) -> dict:
    return {"role": "user", "content": content}


def build(tokenizer) -> list[dict]:
    rng = random.Random(SEED)
    records: list[dict] = []
    count = lambda text: len(tokenizer.encode(text))  # noqa: E731
    for name, wanted in PLAN:
        source = _source(name)
        tasks = list(TEMPLATES[source.domain])
        files = [f for f in iter_files(source) if is_benchmark_file(f.file_id)]
        rng.shuffle(files)
        taken = 0
        for file in files:
            if taken == wanted:
                break
            window = pick_window(file.text, count, rng, *CODE_TOKENS)
            if window is None:
                continue
            task = tasks[taken % len(tasks)]
            content = code_prompt(file, task, window)
            records.append(_record(source.domain, task, [_user(content)], file.file_id, source.license, tokenizer))
            taken += 1
        if taken < wanted:
            raise SystemExit(f"{source.label}: only {taken} of {wanted} benchmark files have a usable window")
    for name, spec in TPC_SPECS.items():
        content = TPC_TEMPLATE.format(spec=spec)
        records.append(_record("sql", "schema", [_user(content)], f"speculab:{name}", "Apache-2.0 (written for speculab)", tokenizer))
    records += agentic(tokenizer, used={r["source"] for r in records})
    counters: dict[str, int] = {}
    for r in records:
        counters[r["domain"]] = counters.get(r["domain"], 0) + 1
        r["id"] = f"{r['domain']}-{counters[r['domain']]:03d}"
    return [{"id": r.pop("id"), **r} for r in records]


def agentic(tokenizer, used: set[str]) -> list[dict]:
    """The agentic slice: AGENTIC_PLAN's files in turn through AGENTIC_TASKS, one conversation a file."""
    rng = random.Random(AGENTIC_SEED)
    count = lambda text: len(tokenizer.encode(text))  # noqa: E731
    records: list[dict] = []
    for name, wanted in AGENTIC_PLAN:
        source = _source(name)
        files = [f for f in iter_files(source) if is_benchmark_file(f.file_id) and f.file_id not in used]
        rng.shuffle(files)
        taken = 0
        for file in files:
            if taken == wanted:
                break
            window = pick_window(file.text, count, rng, *AGENTIC_CODE_TOKENS)
            task = AGENTIC_TASKS[(len(records)) % len(AGENTIC_TASKS)]
            path = file.path.removeprefix("package/")
            messages = window and agentic_messages(task, source.domain, path, source.label, window)
            if not messages:
                continue
            records.append(_record("agentic", task, messages, file.file_id, source.license, tokenizer) | {"language": source.domain})
            taken += 1
        if taken < wanted:
            raise SystemExit(f"{source.label}: only {taken} of {wanted} benchmark files make an agentic conversation")
    return records


def _record(domain: str, task: str, messages: list[dict], source: str, license: str, tokenizer) -> dict:
    return {
        "domain": domain,
        "task": task,
        "messages": messages,
        "source": source,
        "license": license,
        "prompt_tokens": len(tokenizer.encode_chat(messages)),
    }


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=WORKLOAD_PATH)
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)

    text = dumps(build(Tokenizer(ensure_embedded_model())))
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("identical" if same else f"{args.out} differs from a fresh build")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    sources = {s.label: source_record(s) for s in SOURCES}
    (args.out.parent / "workload.sources.json").write_text(
        json.dumps({"seed": SEED, "python": sys.version.split()[0], "sources": sources}, indent=1) + "\n"
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
