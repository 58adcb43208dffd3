"""The agentic slice's conversations, made from code with no model: what each asks, and that its answers are exact."""

import json

from speculab.bench.workload import SHIPPED
from speculab.corpora.agentic import agentic_messages, functions, identifier, lint_report, new_name, renamed
from speculab.corpora.prompts import Window

PYTHON = '''def load(path):
    return parse(open(path).read())


def parse(text):
    """Split it."""
    parts = text.split(",")
    return [p.strip() for p in parts if p] + [parts for parts in (parts,) if parts and len(parts) > 100000000000000000000000]
'''
TS = """export function total(items: Item[]): number {
  return items.reduce((sum, item) => sum + item.price, 0);
}

/** The first item. */
export function first(items: Item[]): Item | undefined {
  return items[0];
}
"""


def test_identifier_is_the_most_used_non_keyword_outside_strings():
    assert identifier(PYTHON, "python") == "parts"
    assert identifier(TS, "typescript") == "items"
    assert identifier("x = 1\n", "python") is None  # nothing used three times


def test_rename_touches_whole_words_only():
    assert renamed("parts partsx _parts parts.x", "parts", "parts_renamed") == "parts_renamed partsx _parts parts_renamed.x"
    assert new_name("items", "typescript") == "itemsRenamed" and new_name("my_items", "typescript") == "my_items_renamed"


def test_lint_report_finds_long_lines_and_undocumented_functions():
    report = lint_report("a.py", PYTHON, "python")
    assert report == ["a.py:8: line too long (125 > 79)", "a.py:1: function `load` has no docstring"]
    assert lint_report("a.ts", TS, "typescript") == ["a.ts:1: function `total` has no JSDoc comment"]
    assert functions(TS, "typescript") == ["total", "first"]


def test_second_turn_repeats_the_code_renamed_exactly():
    window = Window(PYTHON, 100)
    first, answer, again = agentic_messages("second-turn", "python", "a.py", "src@1", window)
    assert [first["role"], answer["role"], again["role"]] == ["user", "assistant", "user"]
    assert PYTHON in first["content"] and renamed(PYTHON, "parts", "parts_renamed") in answer["content"]
    assert "comment above each function" in again["content"]


def test_each_task_asks_for_the_whole_code_back():
    window = Window(TS, 80)
    for task in ("rename", "lint-fix", "apply-review"):
        (message,) = agentic_messages(task, "typescript", "a.ts", "src@1", window)
        assert TS in message["content"] and ("complete" in message["content"] or "full" in message["content"])
    assert agentic_messages("lint-fix", "typescript", "a.ts", "src@1", Window("const a = 1;\n", 5)) is None


def test_the_shipped_slice_was_made_by_this_module():
    """Every shipped second turn's answer is the rename of the code its first turn showed."""
    records = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    turns = [r for r in records if r["domain"] == "agentic" and r["task"] == "second-turn"]
    assert len(turns) == 6
    for r in turns:
        first, answer = r["messages"][0]["content"], r["messages"][1]["content"]
        old = first.split("`")[1]
        code = first.split("\n```", 1)[0] and first[first.index("```") :].split("\n", 1)[1].rsplit("```", 1)[0]
        assert renamed(code, old, new_name(old, r["language"])) in answer
