"""Agent-length training prompts: task prompts after whole training-share files (tiny target, made-up files)."""

import random

import pytest

from speculab import runtime
from speculab.corpora.sources import Source, SourceFile
from speculab.train import training_prompts
from speculab.train.card import write_card
from speculab.train.distill_data import data_manifest, generate_sequences, load_features
from speculab.train.training_prompts import DataSpec, draw_prompts
from tests.helpers import save_tiny_checkpoint

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
SPEC = DataSpec(num_prompts=6, prompt_tokens=(20, 40), response_tokens=8, seed=4, kind="long", context_tokens=(300, 450))


def made_up_files(domain: str) -> list[SourceFile]:
    """Six files of 290-340 words a domain (a word is a token of the tiny tokenizer), in blocks of four lines; each
    line starts with its file's own word, which the tiny tokenizer knows (the others it reads as one unknown token)."""
    source = Source(f"made-up-{domain}", domain, "npm", "1.0", "MIT", ("*",))
    rng = random.Random(domain)
    files = []
    for n in range(6):
        own = f"w{10 * (1 + 'pst'.index(domain[0])) + n}"
        lines = [f"{own} " + " ".join(rng.choice(WORDS) for _ in range(7)) for _ in range(36 + n)]
        blocks = ["\n".join(lines[i : i + 4]) for i in range(0, len(lines), 4)]
        files.append(SourceFile(source, f"package/f{n}.txt", "\n\n".join(blocks) + "\n"))
    return files


@pytest.fixture()
def loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(training_prompts, "training_files", made_up_files)
    return runtime.load(save_tiny_checkpoint(tmp_path / "target", seed=2), dtype="float32")


def test_a_long_prompt_is_its_task_after_other_training_files(loaded):
    long = draw_prompts(loaded.tokenizer, SPEC)
    tasks = draw_prompts(loaded.tokenizer, DataSpec(**{**SPEC.__dict__, "kind": "tasks"}))
    assert long == draw_prompts(loaded.tokenizer, SPEC)  # drawn from the seed alone
    training = {f.file_id for domain in ("python", "sql", "typescript") for f in made_up_files(domain)}
    for prompt, task in zip(long, tasks, strict=True):
        assert (prompt["source"], prompt["task"], prompt["domain"]) == (task["source"], task["task"], task["domain"])
        assert prompt["context_files"] and prompt["source"] not in prompt["context_files"]
        assert set(prompt["context_files"]) <= training
        assert all(f.startswith(f"made-up-{prompt['domain']}@") for f in prompt["context_files"])  # its own language
        assert 300 - 12 <= len(prompt["prompt_ids"]) <= 450  # within a line of its drawn length, never over
        request = task["prompt_ids"][2:]  # the task's message after the role word, then the generation prompt
        assert prompt["prompt_ids"][-len(request) :] == request
    assert len({tuple(p["context_files"]) for p in long}) > 1  # prompts start at different files


def test_long_prompts_are_answered_and_the_card_names_them_and_their_files(loaded, tmp_path):
    records = generate_sequences(loaded, SPEC, tmp_path / "long", batch_size=2)
    features = load_features(tmp_path / "long", records)
    for record in records:
        assert record["context_files"] and record["response_ids"]
        width = loaded.model.config.hidden_size
        assert features[record["id"]].shape == (len(record["prompt_ids"]) + len(record["response_ids"]) - 1, width)
    manifest = data_manifest(records, [DataSpec(num_prompts=0), SPEC])
    assert manifest["long_prompts"] == 6
    assert {f for r in records for f in r["context_files"]} <= set(manifest["files"])
    loop = {"steps_done": 1, "finished": True, "seconds": 60.0, "final": {}}
    card = write_card(tmp_path, title="t", summary=[], data=manifest, loop=loop, acceptance={"prompts": 0}, plot="p.png", command=["x"])
    assert (
        "- 6 of the sequences agent-length prompts: task prompts after whole training-share files of their language, 300-450"
        in card.read_text()
    )


def test_held_out_prompts_avoid_the_files_a_long_prompt_quotes(loaded):
    long = draw_prompts(loaded.tokenizer, SPEC)
    read = {f for p in long for f in training_prompts.files_read(p)}
    assert read > {p["source"] for p in long}  # the quoted files count, not only the tasks'
    candidates = draw_prompts(loaded.tokenizer, DataSpec(num_prompts=12, seed=9))  # what held_out_prompts draws from
    source_of = {tuple(p["prompt_ids"]): p["source"] for p in candidates}
    assert {p["source"] for p in candidates} & read  # so leaving them out is a choice the check makes
    held_out = training_prompts.held_out_prompts(loaded.tokenizer, read, count=3, seed=9)
    assert held_out and not {source_of[tuple(ids)] for ids in held_out} & read
