"""The method table: each method's proposer named once, and its drafter rule (a target other than the embedded model
needs its own drafter, in every command)."""

import ast
from pathlib import Path

import pytest

from speculab.methods import (
    METHODS,
    as_chain,
    chain_length,
    draft_nodes,
    make_proposer,
    new_proposer,
    parse_method,
    require_own_drafter,
    shipped_drafter_key,
)
from speculab.speculative.eagle import EagleProposer, StaticTreeEagleProposer
from speculab.speculative.proposer import Proposer


def test_every_method_has_a_proposer_of_its_name():
    for name, method in METHODS.items():
        assert issubclass(method.proposer, Proposer), name
        assert method.proposer.name == name, name
    # the fixed tree: a Python-API option built by its class, not a method of the command line
    assert StaticTreeEagleProposer.name not in METHODS and issubclass(StaticTreeEagleProposer, EagleProposer)


def test_every_entry_names_what_it_maps_and_its_recipe_imports():
    for name, method in METHODS.items():
        params = method.defaults
        for on in (method.vllm, method.sglang):
            if on is not None:
                assert set(getattr(on, "settings", {}).values()) <= set(params), name
                assert set(getattr(on, "v0_flags", {}).values()) <= set(params), name
        if method.proposer.name != "baseline":
            assert method.chain in params and "policy" in params, name
            assert method.vllm is not None and (method.sglang is not None or method.sglang_missing), name
        assert method.drafter is None or method.drafter in params, name
        if method.recipe:
            recipe = method.recipe_class()
            assert recipe.HELP and callable(recipe.add_flags) and callable(recipe.setup), name


# drafter kinds are the architectures the memory arithmetic sizes (a draft model, an EAGLE-1 head, an EAGLE-3 head),
# named as the methods that draft with them; a method names its kind in its entry (``memory_kind``)
NOT_METHOD_TABLES = {"models/memory.py"}


def test_no_table_keyed_by_method_name_lives_outside_the_registry():
    """A module-level dict keyed by two method names or more, or a tuple, list or set of nothing but method names, in
    speculab/ is a second table: everything method-specific hangs off the method's entry in ``methods.METHODS``."""
    names = set(METHODS) - {"baseline"}
    root = Path(__file__).resolve().parents[1] / "speculab"
    found = []
    for path in root.rglob("*.py"):
        where = str(path.relative_to(root))
        if where in ("methods.py", *NOT_METHOD_TABLES):
            continue
        for node in ast.parse(path.read_text()).body:
            value = getattr(node, "value", None)
            if isinstance(value, ast.Dict):
                named = [k.value for k in value.keys if isinstance(k, ast.Constant) and k.value in names]
            elif isinstance(value, (ast.Tuple, ast.List, ast.Set)):
                constants = [e.value for e in value.elts if isinstance(e, ast.Constant)]
                named = constants if constants and set(constants) <= names else []
            else:
                continue
            if len(named) >= 2:
                found.append(f"{where}:{node.lineno} {sorted(named)}")
    assert not found, found


def test_a_tree_becomes_a_chain_for_engines_that_verify_chains():
    eagle = parse_method("eagle")
    assert chain_length(eagle) == 3 and draft_nodes(eagle) == 3
    chain = as_chain(eagle, 2)
    assert [chain.params[k] for k in ("num_steps", "topk", "num_draft_tokens", "policy")] == [2, 1, 3, None]
    assert as_chain(parse_method("ngram"), 2).params["num_speculative_tokens"] == 2
    assert as_chain(parse_method("draft"), 0) == parse_method("baseline")
    assert draft_nodes(parse_method("eagle:num_steps=5,topk=8,num_draft_tokens=32")) == 31
    assert draft_nodes(parse_method("eagle:num_steps=3,topk=1,num_draft_tokens=8")) == 3  # as the proposer counts them


def test_the_parameters_that_became_named_policies_say_their_new_spelling():
    with pytest.raises(ValueError, match="batch_budget is now a speculation policy, policy=shared:B"):
        parse_method("eagle:batch_budget=4")
    with pytest.raises(ValueError, match="disable_by_batch_size is now a speculation policy, policy=plain_above:N"):
        parse_method("ngram:disable_by_batch_size=4")
    with pytest.raises(ValueError, match="shared:B takes an integer B"):
        parse_method("ngram:policy=shared:many")
    with pytest.raises(ValueError, match="missing.json"):  # a file is read as the spec is, not when the model has loaded
        parse_method("ngram:policy=/nowhere/missing.json")
    assert parse_method("ngram:policy=AUTO").params["policy"] == "auto" and parse_method("eagle:policy=none").params["policy"] is None
    label = parse_method("eagle").label
    assert label == "eagle(num_steps=3,topk=2,num_draft_tokens=4,draft_vocab=auto,policy=shared:4)"
    assert parse_method("eagle:policy=off").label == "eagle(num_steps=3,topk=2,num_draft_tokens=4,draft_vocab=auto)"


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


def test_a_commands_policy_reaches_every_speculative_method_left_at_its_default_one(tmp_path):
    from speculab.methods import with_policy

    mine, theirs = tmp_path / "mine.json", tmp_path / "theirs.json"
    for path in (mine, theirs):
        path.write_text('{"draft_budget": [{"batch_size": 1, "draft_nodes": 2}]}')
    assert parse_method("eagle").params["policy"] == "shared:4"  # EAGLE's default: a named policy
    assert with_policy(parse_method("eagle"), str(mine)).params["policy"] == str(mine)
    assert with_policy(parse_method("eagle"), "plain_above:8").params["policy"] == "plain_above:8"
    assert with_policy(parse_method("eagle:policy=shared:2"), str(mine)).params["policy"] == "shared:2"
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
    head = write_eagle3_head(tmp_path / "head", AutoConfig.from_pretrained(path), draft_vocab_size=64)  # ids 0, 2, ..., 126
    save_ranking(head, torch.tensor([6, 5, 4, 2, 0, 1]), torch.tensor([9, 8, 7, 6, 5, 4]))
    cut = proposer_options(parse_method(f"eagle3:eagle={head},draft_vocab=4"), loaded)["head"]
    assert sorted(cut.map_tokens(torch.arange(len(cut.d2t))).tolist()) == [2, 4, 6]  # 5, among the first 4, is not its
    auto = proposer_options(parse_method(f"eagle3:eagle={head}"), loaded)["head"]  # the ranking's first 4,096
    assert sorted(auto.map_tokens(torch.arange(len(auto.d2t))).tolist()) == [0, 2, 4, 6]
    assert len(proposer_options(parse_method(f"eagle3:eagle={head},draft_vocab=none"), loaded)["head"].d2t) == 64
    (head / "draft_vocab.safetensors").unlink()  # auto without a ranking: every row
    assert len(proposer_options(parse_method(f"eagle3:eagle={head}"), loaded)["head"].d2t) == 64


def test_specs_that_differ_only_in_their_policy_share_one_loaded_drafter(tmp_path):
    from transformers import AutoConfig

    from speculab.methods import POLICY, proposer_options_of
    from speculab.runtime import load
    from tests.helpers import save_tiny_checkpoint, write_eagle3_head

    path = save_tiny_checkpoint(tmp_path / "target", seed=1)
    loaded = load(path, "float32", "cpu")
    head = write_eagle3_head(tmp_path / "head", AutoConfig.from_pretrained(path), draft_vocab_size=64)
    specs = [parse_method(f"eagle3:eagle={head},policy={p}") for p in ("shared:4", "shared:2")]
    specs.append(parse_method(f"eagle3:eagle={head},policy=shared:4,num_steps=2"))
    options_of = proposer_options_of(specs, loaded)
    first, second, other = (options_of[s.label] for s in specs)
    assert first["head"] is second["head"]  # one head, so one prompt state in a prompt cache
    assert first[POLICY] != second[POLICY]
    assert other["head"] is not first["head"]
    proposers = [new_proposer(s, options_of[s.label]) for s in specs[:2]]
    assert proposers[0].prompt_cache_key == proposers[1].prompt_cache_key
