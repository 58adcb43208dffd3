"""SpeculationLimit: plain decoding above a batch size, speculation again (lossless) when the batch shrinks."""

import pytest
import torch

from speculab.engine import Engine
from speculab.models.eagle_head import load_eagle_head
from speculab.sampling import SamplingParams
from speculab.speculative.limit import SpeculationLimit
from speculab.speculative.proposer import Proposer
from speculab.speculative.registry import make_proposer
from tests.helpers import tiny_model, write_eagle_head


@pytest.mark.parametrize("method", ["draft", "eagle"])
@pytest.mark.parametrize("limit", [1, 2])
def test_limit_decodes_plainly_above_it_and_resumes_losslessly(tmp_path, hf_target, target, method, limit):
    if method == "eagle":
        head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
        inner = make_proposer("eagle", head=head, target=target, num_steps=3, topk=2, num_draft_tokens=5)
    else:
        inner = make_proposer("draft", model=tiny_model(seed=3, num_hidden_layers=1), num_speculative_tokens=3)
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (5, 9, 4, 12)]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 20, 9, 24)]
    base = Engine(target, max_batch=3, max_seq_len=128).generate(prompts, params)
    limited = SpeculationLimit(inner, limit)
    spec = Engine(target, max_batch=3, max_seq_len=128, proposer=limited).generate(prompts, params)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert sum(r.stats.steps - r.stats.drafts for r in spec) > 0  # steps without a draft: three requests ran at once
    assert sum(r.stats.draft_nodes for r in spec) > 0  # it speculated once the batch shrank
    with pytest.raises(ValueError, match="at least 1"):
        SpeculationLimit(inner, 0)


def test_limit_is_a_proposer_with_the_inner_ones_interface(target):
    inner = make_proposer("draft", model=tiny_model(seed=3, num_hidden_layers=1), num_speculative_tokens=3)
    limited = SpeculationLimit(inner, 2)
    assert isinstance(limited, Proposer)
    assert (limited.name, limited.max_draft_tokens, limited.headroom) == ("draft", 3, inner.headroom)
    assert (limited.needs_features, limited.feature_layers, limited.prompt_cache_key) == (False, (), inner.prompt_cache_key)
    assert hasattr(inner, "k") and not hasattr(limited, "k")  # only the interface is forwarded, nothing else


def test_limit_is_a_method_parameter():
    from speculab.methods import parse_method

    spec = parse_method("ngram:disable_by_batch_size=4")
    assert (
        spec.params["disable_by_batch_size"] == 4
        and spec.label == "ngram(num_speculative_tokens=4,prompt_lookup_min=2,prompt_lookup_max=5,disable_by_batch_size=4)"
    )
    assert parse_method("eagle").params["disable_by_batch_size"] is None
