"""The EAGLE trainer on a tiny target: features, loss going down, a saved head that is lossless."""

import json
import os
import signal

import pytest
import torch

from speculab.engine import Engine
from speculab.methods import make_proposer
from speculab.models.eagle_head import load_eagle_head
from speculab.models.llama import prefill
from speculab.sampling import SamplingParams
from speculab.train import loop
from speculab.train.distill_data import FeatureRecorder, batches_by_tokens
from speculab.train.eagle import head_loss, make_batch, new_head, save_head
from tests.helpers import speculab_from_hf, tiny_hf_model


def sequences_with_features(target, n=6, length=40, seed=0):
    """Prompts answered greedily by the target, with features recorded by the engine."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 256, (length,), generator=g).tolist() for _ in range(n)]
    recorder = FeatureRecorder()
    requests = Engine(target, max_batch=3, max_seq_len=128, proposer=recorder).generate(
        prompts, SamplingParams(max_tokens=24, ignore_eos=True)
    )
    return [(r.prompt_ids + r.output_ids, recorder.take(r.id)) for r in requests]


def test_recorded_features_equal_a_plain_forward():
    target = speculab_from_hf(tiny_hf_model("llama", seed=1))
    (ids, feats), *_ = sequences_with_features(target, n=2)
    assert feats.shape == (len(ids) - 1, target.config.hidden_size)
    cache = target.new_cache(1, len(ids))
    outs = prefill(target, cache, 0, ids[:-1])
    plain = torch.cat([o.hidden[0] for o in outs])
    torch.testing.assert_close(feats, plain, rtol=1e-4, atol=1e-4)


def test_training_steps_reduce_the_loss(tmp_path):
    target = speculab_from_hf(tiny_hf_model("llama", seed=1), prepack=False)
    items = sequences_with_features(target)
    head = new_head(target, seed=0)
    batch = make_batch(items[:4])
    with torch.no_grad():
        before = float(head_loss(head, target, batch, noise=False, token_loss_share=1.0)[0])
    cfg = loop.LoopConfig(steps=60, lr=3e-3, warmup_steps=5, checkpoint_every=20)
    stream = lambda start: (make_batch(g) for g in batches_by_tokens(items, 4 * 64, seed=0))  # noqa: E731
    result = loop.run(head, stream, lambda b: head_loss(head, target, b), cfg, tmp_path)
    with torch.no_grad():
        after = float(head_loss(head, target, batch, noise=False, token_loss_share=1.0)[0])
    assert result.steps_done == 60 and result.finished
    assert after < 0.85 * before, (before, after)
    assert (tmp_path / loop.CHECKPOINT).exists() and len(loop.read_log(tmp_path)) == 60


def test_resume_continues_from_the_checkpoint(tmp_path):
    target = speculab_from_hf(tiny_hf_model("llama", seed=1), prepack=False)
    items = sequences_with_features(target, n=3)
    stream = lambda start: (make_batch(g) for g in batches_by_tokens(items, 2 * 64, seed=0))  # noqa: E731
    head = new_head(target, seed=0)
    loop.run(head, stream, lambda b: head_loss(head, target, b), loop.LoopConfig(steps=6, checkpoint_every=3), tmp_path)
    again = new_head(target, seed=5)
    result = loop.run(
        again, stream, lambda b: head_loss(again, target, b), loop.LoopConfig(steps=9, checkpoint_every=3), tmp_path, resume=True
    )
    assert result.steps_done == 9
    assert [h["step"] for h in loop.read_log(tmp_path)] == list(range(1, 10))


def test_a_kill_keeps_every_step_done_and_resume_goes_on_from_it(tmp_path):
    target = speculab_from_hf(tiny_hf_model("llama", seed=1), prepack=False)
    items = sequences_with_features(target, n=3)
    stream = lambda start: (make_batch(g) for g in batches_by_tokens(items * 4, 2 * 64, seed=0))  # noqa: E731
    head, calls = new_head(target, seed=0), []

    def interrupted_at_the_fifth(batch):
        calls.append(1)
        if len(calls) == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # as a sitting's end stops a background run
        return head_loss(head, target, batch)

    cfg = loop.LoopConfig(steps=8, checkpoint_every=100, max_minutes=30)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        loop.run(head, stream, interrupted_at_the_fifth, cfg, tmp_path)
    assert signal.getsignal(signal.SIGTERM) is before  # the loop's handler lives only while it trains
    saved = torch.load(tmp_path / loop.CHECKPOINT, weights_only=True)
    assert saved["step"] == 4 and saved["seconds"] > 0  # no periodic checkpoint was due: the interrupt wrote it
    again = new_head(target, seed=5)
    result = loop.run(again, stream, lambda b: head_loss(again, target, b), cfg, tmp_path, resume=True)
    assert result.steps_done == 8 and [h["step"] for h in loop.read_log(tmp_path)] == list(range(1, 9))


def test_saved_head_is_published_layout_and_lossless(tmp_path):
    hf = tiny_hf_model("llama", seed=1)
    trainable = speculab_from_hf(hf, prepack=False)
    head = new_head(trainable, seed=0)
    save_head(head, hf.config.to_dict(), tmp_path, dtype=torch.float32)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["bias"] is True and config["num_hidden_layers"] == 1
    from safetensors.torch import load_file

    names = set(load_file(tmp_path / "model.safetensors"))
    assert {"fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.mlp.gate_proj.weight"} <= names
    assert not any("input_layernorm" in n for n in names)

    target = speculab_from_hf(hf)
    loaded = load_eagle_head(tmp_path, target, prepack=False)
    torch.testing.assert_close(loaded.fc.weight, head.fc.weight)
    prompts = [list(range(5, 25)), list(range(40, 47))]
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    base = Engine(target, max_batch=2, max_seq_len=128).generate(prompts, params)
    proposer = make_proposer("eagle", head=loaded, target=target, num_steps=3, topk=2, num_draft_tokens=6)
    spec = Engine(target, max_batch=2, max_seq_len=128, proposer=proposer).generate(prompts, params)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
