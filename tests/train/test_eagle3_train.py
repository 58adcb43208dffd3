"""The EAGLE-3 trainer (training-time test) on a tiny target: what each unrolled step sees, loss going
down, and a saved head in the published layout that is lossless in the engine."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from speculab.engine import Engine
from speculab.methods import make_proposer
from speculab.models.eagle3_head import load_eagle3_head
from speculab.models.kv_cache import KVCache
from speculab.models.llama import ForwardBatch
from speculab.sampling import SamplingParams
from speculab.train import loop
from speculab.train.distill_data import batches_by_tokens
from speculab.train.eagle3 import draft_vocabulary, make_batch, new_eagle3_head, save_eagle3_head, ttt_loss, unrolled_hidden
from tests.helpers import bigram_hf_model, speculab_from_hf, tiny_hf_model
from tests.train.test_eagle_train import sequences_with_features

DRAFT_VOCAB = 96


@pytest.fixture(scope="module")
def setup():
    hf = tiny_hf_model("llama", seed=1, num_hidden_layers=6)
    target = speculab_from_hf(hf, prepack=False)
    items = sequences_with_features(target, n=6)
    counts = torch.bincount(torch.tensor([t for ids, _ in items for t in ids]), minlength=256)
    ranking = counts.argsort(descending=True, stable=True)[: int((counts > 0).sum())]
    target_ids, _, _ = draft_vocabulary(ranking, DRAFT_VOCAB, 256)
    return hf, target, items, target_ids


def test_draft_vocabulary_maps_both_ways():
    ranking = torch.tensor([9, 4, 200])
    target_ids, d2t, t2d = draft_vocabulary(ranking, 5, 256)
    assert target_ids.tolist() == [0, 1, 4, 9, 200]  # the ranked three, then the lowest unranked ids
    assert (torch.arange(5) + d2t).tolist() == target_ids.tolist()
    assert t2d.sum() == 5 and t2d[target_ids].all()
    with pytest.raises(ValueError, match="between 1"):
        draft_vocabulary(ranking, 0, 256)


def test_each_unrolled_step_sees_what_a_draft_chain_sees(setup):
    """Step k at position t, computed for all t at once, equals a chain grown one entry at a time from
    position t: the target-fed entries 0..t, then the head's own outputs fed back at positions t+1..t+k."""
    hf, target, items, target_ids = setup
    head = new_eagle3_head(target, target_ids, seed=3, init_std=0.1)
    batch = make_batch(target, target_ids, items[:2])
    steps = 3
    unrolled = [h.detach() for h in unrolled_hidden(head, target, batch, steps)]
    row, t = 1, 7
    cache = KVCache(1, 1, head.config.num_kv_heads, head.config.head_dim, 64, torch.float32)
    positions = torch.arange(t + 1)[None]
    step0 = ForwardBatch(torch.tensor([0]), positions, positions, (positions[0][None, :] <= positions[0][:, None])[None, None])
    with torch.no_grad():
        hidden = head.hidden(target, batch.tokens[row : row + 1, 1 : t + 2], batch.features[row : row + 1, : t + 1], step0, cache)[:, -1:]
        torch.testing.assert_close(hidden[0, 0], unrolled[0][row, t], rtol=1e-4, atol=1e-5)
        for k in range(1, steps):
            pos = torch.tensor([[t + k]])
            mask = (torch.arange(t + k + 1) <= t + k)[None, None, None]
            step = ForwardBatch(torch.tensor([0]), pos, pos, mask)
            hidden = head.hidden(target, batch.tokens[row : row + 1, t + 1 + k : t + 2 + k], hidden, step, cache)
            torch.testing.assert_close(hidden[0, 0], unrolled[k][row, t], rtol=1e-4, atol=1e-5)


def test_answer_only_training_unrolls_the_same_drafts_from_the_answer_on(setup):
    """With the answer's start known, later steps run only from the earliest answer in the batch, and what they
    compute there is what the every-position unroll computes; the loss counts each row's answer only."""
    hf, target, items, target_ids = setup
    head = new_eagle3_head(target, target_ids, seed=3, init_std=0.1)
    starts = [30, 34]
    answered = [(ids, feats, start) for (ids, feats), start in zip(items[:2], starts)]
    everywhere, answers = make_batch(target, target_ids, items[:2]), make_batch(target, target_ids, answered)
    assert answers.start == 29 and answers.first_query.tolist() == [29, 33]
    with torch.no_grad():
        full = list(unrolled_hidden(head, target, everywhere, 3))
        part = list(unrolled_hidden(head, target, answers, 3))
        for k in range(3):
            torch.testing.assert_close(part[k], full[k][:, 29:], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(answers.target_logp, everywhere.target_logp[:, 29:])
        loss, _ = ttt_loss(head, target, answers, steps=1)
        # row 1 drafts from position 33, predicting position 34's next token on: columns 0-4 (29-33) never count
        before = answers.target_logp.clone()
        before[1, :5] = before[1, :5].flip(-1)
        unchanged, _ = ttt_loss(head, target, dataclasses.replace(answers, target_logp=before), steps=1)
        before[1, 5] = before[1, 5].flip(-1)
        changed, _ = ttt_loss(head, target, dataclasses.replace(answers, target_logp=before), steps=1)
    assert float(unchanged) == float(loss) and float(changed) != float(loss)


def test_ttt_training_reduces_the_loss_at_every_step(setup, tmp_path):
    hf, target, items, target_ids = setup
    head = new_eagle3_head(target, target_ids, seed=0)
    fixed = make_batch(target, target_ids, items[:4])
    with torch.no_grad():
        before_loss, before = ttt_loss(head, target, fixed, steps=3)
    cfg = loop.LoopConfig(steps=50, lr=3e-3, warmup_steps=5, checkpoint_every=25)
    stream = lambda start: (make_batch(target, target_ids, g) for g in batches_by_tokens(items, 4 * 64, seed=0))  # noqa: E731
    result = loop.run(head, stream, lambda b: ttt_loss(head, target, b, steps=3), cfg, tmp_path)
    with torch.no_grad():
        after_loss, after = ttt_loss(head, target, fixed, steps=3)
    assert result.steps_done == 50
    assert float(after_loss) < 0.7 * float(before_loss), (before_loss, after_loss)  # KL: floor 0
    assert {"top1_step0", "top1_step1", "top1_step2"} <= set(after)


def test_saved_head_is_the_published_layout_and_lossless(setup, tmp_path):
    hf, target, items, target_ids = setup
    head = new_eagle3_head(target, target_ids, seed=0, init_std=0.1)
    save_eagle3_head(head, hf.config.to_dict(), tmp_path, dtype=torch.float32)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == DRAFT_VOCAB
    state = load_file(tmp_path / "model.safetensors")
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "lm_head.weight", "d2t", "t2d"} <= set(state)
    assert state["t2d"].sum() == DRAFT_VOCAB and state["t2d"][target_ids].all()
    inference_target = speculab_from_hf(hf)
    loaded = load_eagle3_head(tmp_path, inference_target)
    assert loaded.map_tokens(torch.arange(DRAFT_VOCAB)).tolist() == target_ids.tolist()
    prompts = [ids[:20] for ids, _ in items[:3]]
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    base = Engine(inference_target, max_batch=3, max_seq_len=128).generate(prompts, params)
    proposer = make_proposer("eagle3", head=loaded, target=inference_target, num_steps=3, topk=2, num_draft_tokens=6)
    spec = Engine(inference_target, max_batch=3, max_seq_len=128, proposer=proposer).generate(prompts, params)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert all(r.stats.draft_nodes > 0 for r in spec)


def test_a_few_ttt_steps_make_drafts_the_engine_accepts(tmp_path):
    """200 training-time-test steps on the bigram target's own answers: on held-out prompts the engine accepts
    at least half of a 3-deep chain's draft tokens (num_draft_tokens counts the root), at every depth."""
    hf = bigram_hf_model(num_hidden_layers=6)
    target = speculab_from_hf(hf, prepack=False)
    items = sequences_with_features(target, n=48)
    target_ids = torch.arange(256)
    head = new_eagle3_head(target, target_ids, seed=0)
    cfg = loop.LoopConfig(steps=200, lr=3e-3, warmup_steps=5, checkpoint_every=1000)
    stream = lambda start: (make_batch(target, target_ids, g) for g in batches_by_tokens(items, 4 * 64, seed=0))  # noqa: E731
    loop.run(head, stream, lambda b: ttt_loss(head, target, b, steps=3), cfg, tmp_path / "state")
    save_eagle3_head(head, hf.config.to_dict(), tmp_path, dtype=torch.float32)
    inference_target = speculab_from_hf(hf)
    proposer = make_proposer(
        "eagle3", head=load_eagle3_head(tmp_path, inference_target), target=inference_target, num_steps=3, topk=1, num_draft_tokens=4
    )
    g = torch.Generator().manual_seed(99)  # prompts the head never saw
    prompts = [torch.randint(3, 256, (40,), generator=g).tolist() for _ in range(4)]
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    spec = Engine(inference_target, max_batch=4, max_seq_len=128, proposer=proposer).generate(prompts, params)
    base = Engine(inference_target, max_batch=4, max_seq_len=128).generate(prompts, params)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    accepted = sum(r.stats.accepted_tokens for r in spec)
    drafted = sum(r.stats.drafted_depth for r in spec)
    assert accepted >= 0.5 * drafted, (accepted, drafted)
    per_depth = [sum(r.stats.accepted_per_position[d] for r in spec if len(r.stats.accepted_per_position) > d) for d in range(3)]
    assert all(n > 0 for n in per_depth), per_depth


def test_a_stopped_run_resumes_exactly(setup, tmp_path):
    """A run stopped after six of nine steps (its data ran out, as a kill after the step-6 checkpoint would
    leave it), then resumed: the same weights, bit for bit, as nine steps in one go, feature noise included
    (the checkpoint keeps the random state)."""
    hf, target, items, target_ids = setup
    cfg = loop.LoopConfig(steps=9, lr=3e-3, warmup_steps=2, checkpoint_every=3)

    def train(out, resume=False, stop_at=None):
        def stream(start):
            for i, group in enumerate(batches_by_tokens(items, 2 * 64, seed=0)):
                if i == stop_at:
                    return
                if i >= start:
                    yield make_batch(target, target_ids, group)

        head = new_eagle3_head(target, target_ids, seed=0)
        loop.run(head, stream, lambda b: ttt_loss(head, target, b, steps=3, feature_noise=0.1), cfg, out, resume=resume)
        return head.state_dict()

    whole = train(tmp_path / "whole")
    train(tmp_path / "parts", stop_at=6)
    resumed = train(tmp_path / "parts", resume=True)
    for name, value in whole.items():
        assert torch.equal(value, resumed[name]), name
