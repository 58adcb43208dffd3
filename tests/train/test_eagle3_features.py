"""The EAGLE-3 feature cache and the batches made from it, on a tiny target: equal to the online batches up
to bf16 rounding, resumed by shard, refused when made for another target; and the feature noise."""

import dataclasses
import json

import pytest
import torch

from speculab.train import eagle3_features
from speculab.train.eagle3 import draft_vocabulary, make_batch, make_cached_batch, new_eagle3_head, ttt_loss, with_feature_noise
from speculab.train.eagle3_features import FOLDER, cached_layer_features, layer_features
from tests.helpers import speculab_from_hf, tiny_hf_model
from tests.train.test_eagle_train import sequences_with_features

BF16_ROUNDING = 2**-8  # relative: bf16 keeps 8 significant bits


@pytest.fixture(scope="module")
def setup():
    hf = tiny_hf_model("llama", seed=1, num_hidden_layers=6)
    engine_target = speculab_from_hf(hf)  # as the engine runs it: what the cache is made with
    trained_target = speculab_from_hf(hf, prepack=False)  # as the trainer holds it
    items = sequences_with_features(engine_target, n=6)
    target_ids, _, _ = draft_vocabulary(torch.arange(256).flip(0), 96, 256)
    return engine_target, trained_target, items, target_ids


def _records(items, shard_of):
    return [
        {"id": f"s{i}", "prompt_ids": ids[:40], "response_ids": ids[40:], "features_file": shard_of(i)} for i, (ids, _) in enumerate(items)
    ]


def test_cached_batches_equal_online_ones(setup, tmp_path):
    engine_target, trained_target, items, target_ids = setup
    records = _records(items, lambda i: f"features-{i // 4:05d}.safetensors")
    fused = cached_layer_features(engine_target, "tiny", tmp_path, records)
    full = [(ids, feats, 40, fused[f"s{i}"]) for i, (ids, feats) in enumerate(items)]
    for group in (full[:3], [(ids, feats, None, f) for ids, feats, _, f in full[3:]]):  # answers only; every position
        online = make_batch(trained_target, target_ids, [g[:3] for g in group])
        cached = make_cached_batch(trained_target, target_ids, group)
        assert cached.start == online.start and torch.equal(cached.first_query, online.first_query)
        for row, (ids, *_) in enumerate(group):
            n = len(ids) - 1  # rows with a feature: every position but the last
            torch.testing.assert_close(cached.features[row, :n], online.features[row, :n], rtol=BF16_ROUNDING, atol=1e-3)
            m = n - online.start  # target columns: positions start..n-1
            torch.testing.assert_close(cached.target_logp[row, :m], online.target_logp[row, :m], rtol=1e-4, atol=1e-4)
            assert torch.equal(cached.in_draft_vocab[row, :m], online.in_draft_vocab[row, :m])
        head = new_eagle3_head(trained_target, target_ids, seed=2, init_std=0.1)
        with torch.no_grad():
            a, _ = ttt_loss(head, trained_target, online, steps=3)
            b, _ = ttt_loss(head, trained_target, cached, steps=3)
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)


def test_cached_features_are_a_plain_forwards_in_bf16(setup, tmp_path):
    engine_target, _, items, _ = setup
    records = _records(items[:2], lambda i: "f.safetensors")
    fused = cached_layer_features(engine_target, "tiny", tmp_path, records)
    for i, (ids, _) in enumerate(items[:2]):
        alone = layer_features(engine_target, [ids])[0]
        assert fused[f"s{i}"].dtype == torch.bfloat16 and fused[f"s{i}"].shape == (len(ids) - 1, 3 * engine_target.config.hidden_size)
        assert torch.equal(fused[f"s{i}"], alone.to(torch.bfloat16))


def test_a_killed_build_resumes_by_shard(setup, tmp_path, monkeypatch):
    engine_target, _, items, _ = setup
    records = _records(items, lambda i: f"features-{i // 2:05d}.safetensors")
    first = cached_layer_features(engine_target, "tiny", tmp_path, records)
    (tmp_path / FOLDER / "features-00001.safetensors").unlink()  # the shard a kill interrupted
    computed = []
    real = eagle3_features.layer_features
    monkeypatch.setattr(eagle3_features, "layer_features", lambda model, seqs: computed.extend(seqs) or real(model, seqs))
    again = cached_layer_features(engine_target, "tiny", tmp_path, records)
    assert sorted(map(len, computed)) == sorted(len(r["prompt_ids"]) + len(r["response_ids"]) for r in records[2:4])
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_a_cache_for_another_target_or_other_data_is_refused(setup, tmp_path):
    engine_target, _, items, _ = setup
    records = _records(items[:2], lambda i: "f.safetensors")
    cached_layer_features(engine_target, "tiny", tmp_path, records)
    with pytest.raises(ValueError, match="spec.json was made for"):
        cached_layer_features(engine_target, "another", tmp_path, records)
    longer = [dict(records[0], response_ids=records[0]["response_ids"] + [5]), records[1]]
    with pytest.raises(ValueError, match=r"f.safetensors has \d+ rows, not \d+, in tensor s0"):
        cached_layer_features(engine_target, "tiny", tmp_path, longer)
    spec = json.loads((tmp_path / FOLDER / "spec.json").read_text())
    assert spec["layers"] == [2, 3, 3] and spec["target"] == "tiny"


def test_feature_noise_is_relative_to_each_layers_scale(setup):
    _, trained_target, items, target_ids = setup
    batch = make_batch(trained_target, target_ids, [(ids, feats, 40) for ids, feats in items[:2]])
    scales = torch.tensor([1.0, 10.0, 100.0]).repeat_interleave(batch.features.shape[-1] // 3)
    scaled = dataclasses.replace(batch, features=batch.features * scales)
    assert with_feature_noise(scaled, 0.0) is scaled
    noisy = with_feature_noise(scaled, 0.2, torch.Generator().manual_seed(0))
    bsz, n, width = scaled.features.shape
    per_layer = scaled.features.view(bsz, n, 3, width // 3)
    rms = per_layer.pow(2).mean(-1, keepdim=True).sqrt()
    ratio = (noisy.features.view(bsz, n, 3, width // 3) - per_layer) / rms
    assert ratio.abs().max() <= 0.1 + 1e-5  # uniform of width 0.2 times the RMS
    for layer in range(3):  # each layer's noise has the same relative spread: the width over sqrt(12)
        assert abs(float(ratio[:, :, layer].std()) - 0.2 / 12**0.5) < 0.005
