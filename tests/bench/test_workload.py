"""The shipped workload: schema, make-up, statistics, provenance, and disjointness from training data."""

import json
from collections import Counter
from pathlib import Path

import pytest

from speculab.bench.workload import SHIPPED, WorkloadError, interleave_domains, load_workload
from speculab.corpora.agentic import TASKS as AGENTIC_TASKS
from speculab.corpora.prompts import TEMPLATES
from speculab.corpora.sources import SOURCES, is_benchmark_file
from speculab.methods import DEFAULT_DRAFT, DEFAULT_EAGLE, DEFAULT_EAGLE3

RECORDS = [json.loads(line) for line in SHIPPED.read_text().splitlines()]


CODING = [r for r in RECORDS if r["domain"] != "agentic"]
AGENTIC = [r for r in RECORDS if r["domain"] == "agentic"]


def test_schema_and_make_up():
    items = load_workload()
    assert len(items) == len(RECORDS) == 124
    assert Counter(i.domain for i in items) == {"python": 34, "typescript": 33, "sql": 33, "agentic": 24}
    assert len({i.id for i in items}) == 124
    for r in RECORDS:
        assert {"id", "domain", "task", "messages", "source", "license", "prompt_tokens"} <= set(r)
    for r in CODING:
        assert r["task"] in TEMPLATES[r["domain"]]
        assert [m["role"] for m in r["messages"]] == ["user"]


def test_the_agentic_slice_is_multi_turn_edits_in_two_languages():
    assert Counter((r["language"], r["task"]) for r in AGENTIC) == {
        (lang, t): 3 for lang in ("python", "typescript") for t in AGENTIC_TASKS
    }
    for r in AGENTIC:
        roles = [m["role"] for m in r["messages"]]
        assert roles == (["user", "assistant", "user"] if r["task"] == "second-turn" else ["user"])
        assert 400 <= r["prompt_tokens"] <= 1500


def test_prompt_length_statistics():
    lengths = [r["prompt_tokens"] for r in CODING]
    assert 1100 <= sum(lengths) / len(lengths) <= 1300  # about 1,200 target tokens a prompt
    assert min(lengths) >= 700 and max(lengths) <= 1500


def test_sources_and_licenses_are_recorded():
    labels = {s.label: s for s in SOURCES}
    meta = json.loads((SHIPPED.parent / "workload.sources.json").read_text())
    assert set(meta["sources"]) == set(labels)
    for r in RECORDS:
        if r["source"].startswith("speculab:"):
            continue
        label = r["source"].rsplit(":", 1)[0]
        assert r["license"] == labels[label].license
        assert labels[label].domain == r.get("language", r["domain"])
    assert len({r["source"] for r in RECORDS}) == 124  # one prompt per file


def test_workload_files_are_in_the_benchmark_share():
    for r in RECORDS:
        assert r["source"].startswith("speculab:") or is_benchmark_file(r["source"]), r["source"]


@pytest.mark.parametrize("asset", [DEFAULT_EAGLE, DEFAULT_EAGLE3, DEFAULT_DRAFT], ids=["eagle", "eagle3", "draft"])
def test_shipped_drafters_never_trained_on_a_workload_file(asset):
    files = json.loads((Path(asset) / "training_files.json").read_text())
    assert files, "the shipped drafter records the files it was trained on"
    workload_files = {r["source"] for r in RECORDS}
    assert not workload_files & set(files)
    assert not any(is_benchmark_file(f) for f in files)


def test_the_split_is_by_file_and_stable():
    ids = [f"pglast@8.8:x/{i}.sql" for i in range(2000)]
    share = sum(map(is_benchmark_file, ids)) / len(ids)
    assert 0.15 < share < 0.25
    assert [is_benchmark_file(i) for i in ids] == [is_benchmark_file(i) for i in ids]


def test_plain_prompt_workloads_and_errors(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"prompt": "hello"}\n\n{"id": "x", "domain": "sql", "prompt": "select 1"}\n')
    items = load_workload(path)
    assert [i.id for i in items] == ["line-1", "x"] and items[0].message_dicts() == [{"role": "user", "content": "hello"}]
    path.write_text('{"prompt": "a"}\n{not json}\n')
    with pytest.raises(WorkloadError, match=r"w.jsonl:2: not valid JSON"):
        load_workload(path)
    path.write_text('{"id": "a", "prompt": "a"}\n{"id": "a", "prompt": "b"}\n')
    with pytest.raises(WorkloadError, match="duplicate id"):
        load_workload(path)
    with pytest.raises(WorkloadError, match="no such workload"):
        load_workload(tmp_path / "none.jsonl")


def test_interleaving_covers_every_domain():
    picked = interleave_domains(load_workload(), 16)
    assert len(picked) == 16
    assert Counter(i.domain for i in picked) == {"python": 4, "typescript": 4, "sql": 4, "agentic": 4}


def test_a_session_is_one_item_a_turn_each_the_conversation_up_to_its_request(tmp_path):
    path = tmp_path / "s.jsonl"
    turns = [{"role": "user", "content": "files, then a"}, {"role": "assistant", "content": "A"}, {"role": "user", "content": "b"}]
    path.write_text(json.dumps({"id": "s1", "domain": "agentic", "task": "session", "language": "python", "session": turns}) + "\n")
    first, second = load_workload(path)
    assert (first.id, second.id) == ("s1/turn-1", "s1/turn-2") and second.language == "python"
    assert first.message_dicts() == turns[:1] and second.message_dicts() == turns
    for bad in ([], turns[:2], [turns[0], turns[0]], "text"):
        path.write_text(json.dumps({"id": "s2", "session": bad}) + "\n")
        with pytest.raises(WorkloadError, match=r"s.jsonl:1: 'session' must be"):
            load_workload(path)


def test_the_shipped_sessions_load_by_name():
    items = load_workload("sessions")
    sessions = Counter(i.id.split("/")[0] for i in items)
    assert len(sessions) == 8 and all(n >= 2 for n in sessions.values())
    assert {i.language for i in items} == {"python", "typescript"} and {i.task for i in items} == {"session"}
