"""The reduced draft vocabulary: the ranking file read back checked, and a drafter's lm_head reduced to its rows."""

import pytest
import torch
from safetensors.torch import save_file

from speculab.models.draft_vocab import RANKING_FILE, ReducedVocabulary, load_token_ranking, save_ranking
from speculab.models.loading import CheckpointError
from tests.helpers import tiny_model

VOCAB = 256


def test_token_ranking_file_is_checked(tmp_path):
    with pytest.raises(CheckpointError, match="no token ranking"):
        load_token_ranking(tmp_path, VOCAB)
    save_file({"token_ids": torch.tensor([5, 5, 1])}, tmp_path / RANKING_FILE)
    with pytest.raises(CheckpointError, match="distinct ids"):
        load_token_ranking(tmp_path, VOCAB)
    save_file({"token_ids": torch.tensor([5, VOCAB])}, tmp_path / RANKING_FILE)
    with pytest.raises(CheckpointError, match=f"below the target's vocab_size {VOCAB}"):
        load_token_ranking(tmp_path, VOCAB)
    save_file({"counts": torch.tensor([3])}, tmp_path / RANKING_FILE)
    with pytest.raises(CheckpointError, match="'token_ids' missing"):
        load_token_ranking(tmp_path, VOCAB)
    save_ranking(tmp_path, torch.tensor([5, 9, 1]), torch.tensor([3, 2, 1]))
    assert load_token_ranking(tmp_path, VOCAB).tolist() == [5, 9, 1]


def test_a_reduced_lm_head_scores_the_kept_tokens_as_the_whole_one_does():
    model = tiny_model(seed=1)
    kept = torch.tensor([7, 3, 200])
    reduced = ReducedVocabulary.of(model, kept)
    hidden = torch.randn(2, model.config.hidden_size)
    whole = hidden @ model.lm_head_rows(torch.arange(model.config.vocab_size)).T
    torch.testing.assert_close(reduced.logits(hidden), whole[:, kept])
    assert len(reduced) == 3 and reduced.to_target(torch.tensor([[2, 0]])).tolist() == [[200, 7]]
    spread = reduced.spread(torch.tensor([0.5, 0.25, 0.25]))  # zero outside the kept tokens: what verification reads
    assert spread[kept].tolist() == [0.5, 0.25, 0.25] and spread.sum() == 1.0 and spread.numel() == model.config.vocab_size
    with pytest.raises(ValueError, match="kept token ids must lie in"):
        ReducedVocabulary(torch.tensor([VOCAB * 4]), torch.zeros(1, 8), VOCAB)
