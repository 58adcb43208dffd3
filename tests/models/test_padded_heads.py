"""Zero attention heads added for tensor parallelism change nothing the model computes."""

import json

import pytest
import torch

from speculab.models.config import CONFIGS
from speculab.models.llama import causal_batch
from speculab.models.padded_heads import pad_attention_heads, padded_counts
from speculab.runtime import load
from tests.helpers import save_tiny_checkpoint


def test_counts_that_ranks_divide_with_the_group_kept():
    smollm2 = CONFIGS["smollm2-135m"]  # 9 query heads in 3 groups of 3
    assert padded_counts(smollm2, 2) == (12, 4) and padded_counts(smollm2, 4) == (12, 4) and padded_counts(smollm2, 3) == (9, 3)


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_padded_model_gives_the_same_logits(tmp_path, ranks):
    source = save_tiny_checkpoint(tmp_path / "src", hidden_size=48, num_attention_heads=3, num_key_value_heads=1, head_dim=16)
    padded = pad_attention_heads(source, tmp_path / "padded", ranks)
    raw = json.loads((padded / "config.json").read_text())
    assert raw["num_attention_heads"] % ranks == 0 and raw["num_key_value_heads"] % ranks == 0
    assert (raw["num_attention_heads"] // raw["num_key_value_heads"], raw["head_dim"]) == (3, 16)  # the group and width kept
    ids = torch.tensor([[5, 9, 11, 5, 9, 11, 7, 3]])
    logits = []
    for path in (source, padded):
        model = load(path, "float32").model
        batch = causal_batch(torch.arange(1), torch.zeros(1, dtype=torch.long), ids.shape[1])
        logits.append(model(ids, batch, model.new_cache(1, 16)).logits)
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=1e-5)
