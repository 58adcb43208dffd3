"""The method table: each method's proposer named once, and its drafter rule (a target other than the embedded model
needs its own drafter, in every command)."""

import pytest

from speculab.methods import METHODS, make_proposer, parse_method, require_own_drafter, shipped_drafter_key
from speculab.speculative.eagle import EagleProposer, StaticTreeEagleProposer
from speculab.speculative.proposer import Proposer


def test_every_method_has_a_proposer_of_its_name():
    for name, method in METHODS.items():
        assert issubclass(method.proposer, Proposer), name
        assert method.proposer.name == name, name
    # the fixed tree: a Python-API option built by its class, not a method of the command line
    assert StaticTreeEagleProposer.name not in METHODS and issubclass(StaticTreeEagleProposer, EagleProposer)


def test_unknown_names_and_options_are_clear_errors():
    with pytest.raises(ValueError, match="unknown method 'medusa'; known: baseline, ngram, suffix, draft, eagle, eagle3"):
        make_proposer("medusa")
    with pytest.raises(ValueError, match="unknown method 'medusa'; known: baseline"):
        parse_method("medusa:num_speculative_tokens=3")
    with pytest.raises(TypeError, match="num_speculative_token"):
        make_proposer("ngram", num_speculative_token=3)


@pytest.mark.parametrize(
    "method,option,said",
    [("eagle", "--{key} PATH", "--eagle PATH"), ("draft", "{key}=PATH", "draft=PATH"), ("eagle3", "--draft PATH", "--draft PATH")],
)
def test_a_shipped_drafter_is_refused_with_the_commands_own_words(method, option, said):
    with pytest.raises(ValueError, match=f"--method {method} needs {said}: the shipped drafters are for the embedded model"):
        require_own_drafter(parse_method(method), option)


def test_an_own_drafter_or_none_passes(tmp_path):
    # the rule itself: which parameter still names a shipped drafter (None: nothing to refuse)
    assert [shipped_drafter_key(parse_method(m)) for m in ("eagle", "eagle3", "draft")] == ["eagle", "eagle", "draft"]
    for text in (f"eagle:eagle={tmp_path}", f"draft:draft={tmp_path}", "ngram", "suffix", "baseline"):
        assert shipped_drafter_key(parse_method(text)) is None, text
        assert require_own_drafter(parse_method(text), "--{key} PATH") is None


def test_a_draft_model_keeps_its_cache_in_the_targets_kv_dtype(tmp_path):
    """One KV dtype for both caches: what the benchmark's memory estimate assumes."""
    import torch

    from speculab.methods import load_draft_model
    from speculab.runtime import load
    from tests.helpers import save_tiny_checkpoint

    target = load(save_tiny_checkpoint(tmp_path / "target", seed=1), "float32", "cpu", kv_dtype="bfloat16")
    draft = load_draft_model(save_tiny_checkpoint(tmp_path / "draft", seed=2, num_hidden_layers=1), target)
    assert draft.new_cache(1, 8).kv.dtype == torch.bfloat16


def test_a_commands_policy_reaches_every_speculative_method_that_names_none(tmp_path):
    from speculab.methods import with_policy

    mine, theirs = tmp_path / "mine.json", tmp_path / "theirs.json"
    for path in (mine, theirs):
        path.write_text('{"by_batch_size": {"1": 2}}')
    assert with_policy(parse_method("eagle"), str(mine)).params["policy"] == str(mine)
    assert with_policy(parse_method(f"ngram:policy={theirs}"), str(mine)).params["policy"] == str(theirs)
    assert with_policy(parse_method("baseline"), str(mine)) == parse_method("baseline")
    assert with_policy(parse_method("draft"), "off") == parse_method("draft") == parse_method("draft:policy=off")
    with pytest.raises(ValueError, match="missing.json"):
        with_policy(parse_method("draft"), str(tmp_path / "missing.json"))


def test_eagle3_draft_vocab_cuts_the_heads_own_vocabulary(tmp_path):
    import torch
    from transformers import AutoConfig

    from speculab.methods import proposer_options
    from speculab.models.draft_vocab import save_ranking
    from speculab.runtime import load
    from tests.helpers import save_tiny_checkpoint, write_eagle3_head

    path = save_tiny_checkpoint(tmp_path / "target", seed=1)
    loaded = load(path, "float32", "cpu")
    head = write_eagle3_head(tmp_path / "head", AutoConfig.from_pretrained(path), draft_vocab=64)  # ids 0, 2, ..., 126
    save_ranking(head, torch.tensor([6, 5, 4, 2, 0, 1]), torch.tensor([9, 8, 7, 6, 5, 4]))
    cut = proposer_options(parse_method(f"eagle3:eagle={head},draft_vocab=4"), loaded)["head"]
    assert sorted(cut.map_tokens(torch.arange(len(cut.d2t))).tolist()) == [2, 4, 6]  # 5, among the first 4, is not its
    auto = proposer_options(parse_method(f"eagle3:eagle={head}"), loaded)["head"]  # the ranking's first 4,096
    assert sorted(auto.map_tokens(torch.arange(len(auto.d2t))).tolist()) == [0, 2, 4, 6]
    assert len(proposer_options(parse_method(f"eagle3:eagle={head},draft_vocab=none"), loaded)["head"].d2t) == 64
    (head / "draft_vocab.safetensors").unlink()  # auto without a ranking: every row
    assert len(proposer_options(parse_method(f"eagle3:eagle={head}"), loaded)["head"].d2t) == 64
