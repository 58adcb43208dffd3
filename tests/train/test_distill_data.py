"""Self-distillation through the engine, continuously batched (tiny target, made-up source files)."""

import pytest
import torch

from speculab import runtime
from speculab.corpora.agentic import TASKS as AGENTIC_TASKS
from speculab.corpora.sources import Source, SourceFile
from speculab.engine import Engine
from speculab.train import training_prompts
from speculab.train.card import write_card
from speculab.train.distill_data import answer_params, data_manifest, generate_sequences, load_features
from speculab.train.training_prompts import DataSpec
from tests.helpers import save_tiny_checkpoint
from tests.train.test_code_windows import made_up_files

SPEC = DataSpec(num_prompts=7, prompt_tokens=(20, 40), response_tokens=12, sampled_share=0.5, seed=3)


@pytest.fixture()
def loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(training_prompts, "training_files", made_up_files)
    return runtime.load(save_tiny_checkpoint(tmp_path / "target", seed=2), dtype="float32")


def fields(records):
    return [(r["id"], r["prompt_ids"], r["response_ids"], r["temperature"]) for r in records]


def test_each_answer_is_the_one_the_prompt_gets_alone(loaded, tmp_path):
    """Slots refill as answers end, and no answer depends on which others shared the batch."""
    records = generate_sequences(loaded, SPEC, tmp_path / "d", batch_size=3, shard_size=2)
    assert [r["id"] for r in records] == sorted(r["id"] for r in records) and len(records) == 7
    prompts = training_prompts.draw_prompts(loaded.tokenizer, SPEC)
    params = answer_params(prompts, SPEC)
    assert {p.temperature for p in params} == {0.0, 0.8}  # greedy and sampled answers both covered
    alone = Engine(loaded.model, 1, 256, loaded.tokenizer.stop_ids)
    for record, prompt, p in zip(records, prompts, params):
        assert record["prompt_ids"] == prompt["prompt_ids"] and record["temperature"] == p.temperature
        assert record["response_ids"] == alone.generate([prompt["prompt_ids"]], p)[0].output_ids
    features = load_features(tmp_path / "d", records)
    for r in records:
        assert features[r["id"]].shape == (len(r["prompt_ids"]) + len(r["response_ids"]) - 1, loaded.model.config.hidden_size)


def test_a_killed_run_resumes_exactly(loaded, tmp_path):
    whole = generate_sequences(loaded, SPEC, tmp_path / "whole", batch_size=3, shard_size=2)
    out = tmp_path / "killed"
    generate_sequences(loaded, SPEC, out, batch_size=3, shard_size=2)
    lines = (out / "sequences.jsonl").read_text().splitlines(keepends=True)
    (out / "sequences.jsonl").write_text("".join(lines[:3]) + lines[3][:15])  # cut mid-line, as a kill leaves it
    resumed = generate_sequences(loaded, SPEC, out, batch_size=3, shard_size=2)
    assert fields(resumed) == fields(whole)
    a, b = load_features(tmp_path / "whole", whole), load_features(out, resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


BLOCK = {
    "python": "def helper_{i}(value):\n    total = value + {i}\n    return total\n",
    "typescript": "export function helper{i}(value: number): number {{\n  const total = value + {i};\n  return total;\n}}\n",
}


def agentic_files(domain: str) -> list[SourceFile]:
    """Made-up files with what an agentic edit needs: functions, and an identifier used three times or more."""
    source = Source(f"made-up-{domain}", domain, "npm", "1.0", "MIT", ("*",))
    return [SourceFile(source, f"f{n}.txt", "\n".join(BLOCK[domain].format(i=n * 10 + i) for i in range(6))) for n in range(4)]


def test_agentic_edits_on_training_files_are_answered_like_the_other_prompts(loaded, tmp_path, monkeypatch):
    monkeypatch.setattr(training_prompts, "training_files", agentic_files)
    spec = DataSpec(num_prompts=4, prompt_tokens=(20, 80), response_tokens=8, seed=1, kind="agentic")
    prompts = training_prompts.draw_prompts(loaded.tokenizer, spec)
    assert [p["task"] for p in prompts] == list(AGENTIC_TASKS)  # the four edits in turn
    assert {p["domain"] for p in prompts} == {"agentic"} and len({p["source"] for p in prompts}) == 4
    assert len({p["source"].split(":")[0] for p in prompts}) == 2  # Python and TypeScript files
    second_turn = prompts[3]["prompt_ids"]
    assert second_turn.count(loaded.tokenizer.encode("<|im_start|>", add_bos=False)[0]) >= 4  # user, assistant, user
    records = generate_sequences(loaded, spec, tmp_path / "agentic", batch_size=2)
    assert [r["id"] for r in records] == [p["id"] for p in prompts] and all(r["response_ids"] for r in records)


def test_a_spec_stored_before_its_kind_existed_reads_as_task_prompts():
    stored = {"num_prompts": 144, "prompt_tokens": [200, 400], "response_tokens": 160, "sampled_share": 0.5, "seed": 2}
    assert DataSpec.stored(stored) == DataSpec(seed=2)
    with pytest.raises(ValueError, match="'tasks', 'agentic' or 'long'"):
        training_prompts.draw_prompts(None, DataSpec(kind="other"))


def test_the_manifest_counts_agentic_edits_apart_from_the_prompt_seeds(tmp_path):
    specs = [DataSpec(num_prompts=4, seed=0), DataSpec(num_prompts=4, seed=1), DataSpec(num_prompts=3, seed=0, kind="agentic")]
    manifest = data_manifest([], specs)
    assert manifest["prompt_seeds"] == [0, 1]  # the agentic folder's seed is not a prompt seed
    assert manifest["agentic_prompts"] == 3 and manifest["agentic_spec"]["kind"] == "agentic"
    acceptance = {"prompts": 0}
    loop = {"steps_done": 1, "finished": True, "seconds": 60.0, "final": {}}
    card = write_card(tmp_path, title="t", summary=[], data=manifest, loop=loop, acceptance=acceptance, plot="p.png", command=["speculab"])
    text = card.read_text()
    assert "- Prompts drawn with seeds 0, 1, 4 per seed." in text
    assert "- Plus 3 agentic edits (rename, lint-fix, apply-review, second turn)" in text
    assert "agentic_prompts" not in data_manifest([], specs[:2])
