"""Self-distillation through the engine, continuously batched (tiny target, made-up source files)."""

import pytest
import torch

from speculab import runtime
from speculab.engine import Engine
from speculab.train import distill_data
from speculab.train.distill_data import DataSpec, answer_params, generate_sequences, load_features
from tests.helpers import save_tiny_checkpoint
from tests.train.test_code_windows import made_up_files

SPEC = DataSpec(num_prompts=7, prompt_tokens=(20, 40), response_tokens=12, sampled_share=0.5, seed=3)


@pytest.fixture()
def loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(distill_data, "training_files", made_up_files)
    return runtime.load(save_tiny_checkpoint(tmp_path / "target", seed=2), dtype="float32")


def fields(records):
    return [(r["id"], r["prompt_ids"], r["response_ids"], r["temperature"]) for r in records]


def test_each_answer_is_the_one_the_prompt_gets_alone(loaded, tmp_path):
    """Slots refill as answers end, and no answer depends on which others shared the batch."""
    records = generate_sequences(loaded, SPEC, tmp_path / "d", batch_size=3, shard_size=2)
    assert [r["id"] for r in records] == sorted(r["id"] for r in records) and len(records) == 7
    prompts = distill_data.draw_prompts(loaded.tokenizer, SPEC)
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
