"""The draft-model distiller on a tiny target: KL going down, an HF checkpoint that is lossless as a drafter."""

import json

import torch

from speculab.engine import Engine
from speculab.methods import make_proposer
from speculab.models.loading import load_model
from speculab.sampling import SamplingParams
from speculab.train import loop
from speculab.train.distill_data import batches_by_tokens
from speculab.train.draft import draft_loss, loss_rows, make_batch, new_draft, save_draft
from tests.helpers import save_tiny_checkpoint
from tests.train.test_eagle_train import sequences_with_features


def test_distillation_reduces_kl_and_saves_a_lossless_drafter(tmp_path):
    folder = save_tiny_checkpoint(tmp_path / "target", seed=1)
    raw = json.loads((folder / "config.json").read_text())
    target = load_model(folder, prepack=False)
    items = sequences_with_features(target)
    draft = new_draft(raw, target.embed_tokens.weight, hidden_size=32, layers=1, intermediate_size=64)
    batch = make_batch(items[:4])
    with torch.no_grad():
        before = float(draft_loss(draft, target, batch)[0])
    stream = lambda start: (make_batch(g) for g in batches_by_tokens(items, 4 * 64, seed=0))  # noqa: E731
    loop.run(draft, stream, lambda b: draft_loss(draft, target, b), loop.LoopConfig(steps=60, lr=3e-3, warmup_steps=5), tmp_path / "run")
    with torch.no_grad():
        after = float(draft_loss(draft, target, batch)[0])
    assert after < 0.85 * before, (before, after)

    out = tmp_path / "draft"
    save_draft(draft, folder, out)
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    drafter = load_model(out)  # speculab loads it as any HF checkpoint
    assert drafter.config.num_layers == 1 and drafter.config.hidden_size == 32
    served = load_model(folder)
    prompts = [list(range(5, 25)), list(range(40, 47)), list(range(60, 90))]
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    base = Engine(served, max_batch=3, max_seq_len=128).generate(prompts, params)
    proposer = make_proposer("draft", model=drafter, num_speculative_tokens=4)
    spec = Engine(served, max_batch=3, max_seq_len=128, proposer=proposer).generate(prompts, params)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]


def test_loss_rows_are_the_kept_tokens_plus_fresh_negatives():
    kept = torch.tensor([7, 3, 11])
    g = torch.Generator().manual_seed(0)
    first, second = loss_rows(kept, 50, 10, g), loss_rows(kept, 50, 10, g)
    for rows in (first, second):
        assert rows[:3].tolist() == [7, 3, 11] and len(set(rows.tolist())) == 13
        assert not set(rows[3:].tolist()) & {7, 3, 11} and rows.max() < 50
    assert not torch.equal(first, second)
    assert sorted(loss_rows(kept, 12, 100, g).tolist()) == list(range(12))  # fewer tokens left than negatives asked


def test_training_on_frequent_tokens_and_negatives_lowers_the_whole_vocabulary_kl(tmp_path):
    folder = save_tiny_checkpoint(tmp_path / "target", seed=1)
    raw = json.loads((folder / "config.json").read_text())
    target = load_model(folder, prepack=False)
    items = sequences_with_features(target)
    counts = torch.bincount(torch.tensor([t for ids, _ in items for t in ids]), minlength=target.config.vocab_size)
    kept = counts.argsort(descending=True)[:64]
    draft = new_draft(raw, target.embed_tokens.weight, hidden_size=32, layers=1, intermediate_size=64)
    batch = make_batch(items[:4])
    with torch.no_grad():
        before = float(draft_loss(draft, target, batch)[0])
        restricted = draft_loss(draft, target, batch, kept)[0]
        assert restricted.isfinite() and float(restricted) != before
    g = torch.Generator().manual_seed(0)
    step = lambda b: draft_loss(draft, target, b, loss_rows(kept, target.config.vocab_size, 32, g))  # noqa: E731
    stream = lambda start: (make_batch(group) for group in batches_by_tokens(items, 4 * 64, seed=0))  # noqa: E731
    loop.run(draft, stream, step, loop.LoopConfig(steps=60, lr=3e-3, warmup_steps=5), tmp_path / "run")
    with torch.no_grad():
        after = float(draft_loss(draft, target, batch)[0])  # over the whole vocabulary
    assert after < 0.85 * before, (before, after)
