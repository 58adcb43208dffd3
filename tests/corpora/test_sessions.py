"""The multi-turn agent sessions: whole files of the pool, then renames turn after turn, each answer the rename done
exactly on the file's latest version, every turn's prompt within the model's positions, and the builder's output."""

import json
import re

from speculab.corpora import sessions as sm
from speculab.corpora.agentic import renamed
from speculab.corpora.context_files import PREAMBLE, load_context_files
from speculab.models.tokenizer import Tokenizer
from tests.conftest import embedded_model_path

RECORDS = [json.loads(line) for line in sm.SESSIONS.read_text(encoding="utf-8").splitlines()]
ASK = re.compile(r"Rename `(\w+)` to `(\w+)` throughout `([^`]+)`")
CODE = re.compile(r"```\w*\n(.*)\n```", re.S)


def test_each_session_quotes_whole_files_of_one_language_then_renames_turn_after_turn():
    pool = {f.id: f for files in load_context_files().values() for f in files}
    assert [r["language"] for r in RECORDS] == ["python"] * 4 + ["typescript"] * 4
    for record in RECORDS:
        files = [pool[f["id"]] for f in record["files"]]
        assert all(
            f.domain == record["language"] and (f.path, f.source, f.license) == (g["path"], g["source"], g["license"])
            for f, g in zip(files, record["files"])
        )
        messages = record["session"]
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + ["user"]
        assert messages[0]["content"].startswith(PREAMBLE) and all(f.text.rstrip() in messages[0]["content"] for f in files)
        latest = {f.path: f.text.rstrip() for f in files}
        for ask, answer in zip(messages[0::2], messages[1::2]):  # each answer: its request's rename of the latest version
            old, new, path = ASK.search(ask["content"]).groups()
            latest[path] = renamed(latest[path], old, new)
            assert CODE.search(answer["content"]).group(1) == latest[path]
        assert 2 <= len(messages[0::2]) <= sm.TURNS


def test_every_turns_prompt_leaves_room_for_its_output():
    tokenizer = Tokenizer(embedded_model_path())
    for record in RECORDS:
        messages = record["session"]
        lengths = [len(tokenizer.encode_chat(messages[: n + 1])) for n in range(0, len(messages), 2)]
        assert lengths == sorted(lengths) and lengths[-1] <= sm.MOST_PROMPT_TOKENS
        held = sum(f["tokens"] for f in _pool_records(record))
        assert held <= sm.CONTEXT_TOKENS or len(record["files"]) == 2


def test_the_shipped_sessions_are_what_the_builder_makes(capsys):
    assert sm.main(["--check"]) == 0
    assert capsys.readouterr().out.strip() == "identical"


def _pool_records(record: dict) -> list[dict]:
    pool = {f.id: f for files in load_context_files().values() for f in files}
    return [{"tokens": pool[f["id"]].tokens} for f in record["files"]]
