"""Loading a method's drafter: a draft model shares the target's tokenizer and KV dtype; ``draft_vocab`` resolves."""

import torch

from speculab.drafters import draft_vocab_size, load_draft_model
from speculab.models.draft_vocab import save_ranking
from speculab.runtime import load
from tests.helpers import save_tiny_checkpoint


def test_a_draft_model_keeps_its_cache_in_the_targets_kv_dtype(tmp_path):
    """One KV dtype for both caches: what the benchmark's memory estimate assumes."""
    target = load(save_tiny_checkpoint(tmp_path / "target", seed=1), "float32", "cpu", kv_dtype="bfloat16")
    draft = load_draft_model(save_tiny_checkpoint(tmp_path / "draft", seed=2, num_hidden_layers=1), target)
    assert draft.new_cache(1, 8).kv.dtype == torch.bfloat16


def test_draft_vocab_auto_is_the_methods_count_where_a_ranking_ships(tmp_path):
    assert draft_vocab_size({"draft_vocab": "auto"}, tmp_path, 4096) is None  # no ranking: the whole vocabulary
    save_ranking(tmp_path, torch.arange(8), torch.arange(8, 0, -1))
    assert draft_vocab_size({"draft_vocab": "auto"}, tmp_path, 4096) == 4096
    assert draft_vocab_size({"draft_vocab": 16}, tmp_path, 4096) == 16
    assert draft_vocab_size({"draft_vocab": None}, tmp_path, 4096) is None
