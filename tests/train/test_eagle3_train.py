"""The EAGLE-3 trainer (training-time test) on a tiny target: what each unrolled step sees, loss going
down, and a saved head in the published layout that is lossless in the engine."""

import json

import pytest
import torch
from safetensors.torch import load_file

from speculab.engine import Engine
from speculab.models.eagle3_head import load_eagle3_head
from speculab.models.kv_cache import KVCache
from speculab.models.llama import ForwardBatch
from speculab.sampling import SamplingParams
from speculab.speculative.proposer import make_proposer
from speculab.train import loop
from speculab.train.distill_data import batches_by_tokens
from speculab.train.eagle3 import draft_vocabulary, make_batch, new_eagle3_head, save_eagle3_head, ttt_loss, unrolled_hidden
from tests.helpers import speculab_from_hf, tiny_hf_model
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
    assert all(r.stats.draft_tokens > 0 for r in spec)
