"""A speculation policy caps each request's draft by the batch size and by its own acceptance: never more than the
cap, and every method still gives the baseline's greedy tokens whatever the policy does mid-request."""

import json

import pytest
import torch

from speculab.engine import Engine
from speculab.methods import make_proposer, new_proposer, parse_method, proposer_options
from speculab.models.eagle_head import load_eagle_head
from speculab.sampling import SamplingParams
from speculab.speculative.eagle import EagleProposer
from speculab.speculative.ngram import NgramProposer
from speculab.speculative.policy import PolicyProposer, SpeculationPolicy
from speculab.speculative.proposer import Proposer, ProposeState, WrappedProposer
from speculab.speculative.tree import Draft
from tests.helpers import tiny_model, write_eagle_head
from tests.speculative.test_lossless import repetitive_prompts

# caps change with the batch size (8 ragged requests finish one by one) and with each request's acceptance
POLICY = SpeculationPolicy(by_batch_size=((1, 4), (3, 2), (6, 0)), min_acceptance=0.6, window=2, probe_nodes=1)


def proposers(hf_target, target, tmp_path):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    return {
        "ngram": make_proposer("ngram", num_speculative_tokens=4, prompt_lookup_min=1, prompt_lookup_max=3),
        "draft": make_proposer("draft", model=tiny_model(seed=11), num_speculative_tokens=4),
        "draft-self": make_proposer("draft", model=target, num_speculative_tokens=4),
        "eagle": make_proposer("eagle", head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8),
    }


class Recording(PolicyProposer):
    """The policy proposer, recording each step's batch size, caps and draft sizes."""

    def propose(self, state: ProposeState) -> list[Draft]:
        drafts = super().propose(state)
        self.steps = getattr(self, "steps", []) + [(len(state.requests), self.last_caps, [len(d) for d in drafts])]
        return drafts

    def caps(self, requests):
        self.last_caps = super().caps(requests)
        return self.last_caps


@pytest.mark.parametrize("method", ["ngram", "draft", "draft-self", "eagle"])
def test_greedy_identical_to_baseline_under_a_policy_that_changes_mid_request(hf_target, target, tmp_path, method):
    prompts = repetitive_prompts(8, seed=3)
    params = [SamplingParams(max_tokens=4 + 5 * i, ignore_eos=True) for i in range(8)]  # they finish one by one
    proposer = Recording(proposers(hf_target, target, tmp_path)[method], POLICY)
    got = Engine(target, max_batch=8, max_seq_len=256, proposer=proposer).generate(prompts, params)
    expected = Engine(target, max_batch=8, max_seq_len=256).generate(prompts, params)
    assert [r.output_ids for r in got] == [r.output_ids for r in expected]
    for batch, caps, sizes in proposer.steps:
        assert all(c is None or n <= c for c, n in zip(caps, sizes))  # never past a cap
        if batch >= 6:
            assert sizes == [0] * batch  # capped at 0: plain decoding
    assert any(batch < 6 and sum(sizes) for batch, _, sizes in proposer.steps)  # and it speculated below that


def test_a_request_that_stops_being_accepted_drafts_probe_nodes():
    policy = SpeculationPolicy(min_acceptance=0.5, window=2, probe_nodes=1)
    proposer = PolicyProposer(Proposer(), policy)

    class Request:
        def __init__(self):
            self.slot, self.stats = 0, type("S", (), {"draft_nodes": 0, "accepted_tokens": 0})()

    r = Request()
    assert proposer.caps([r]) == [None]  # nothing drafted yet
    for drafted, accepted in [(4, 4), (8, 4)]:  # 4 of 4, then 0 of 4: 4/8 = 0.5, not below
        r.stats.draft_nodes, r.stats.accepted_tokens = drafted, accepted
        cap = proposer.caps([r])
    assert cap == [None]
    r.stats.draft_nodes, r.stats.accepted_tokens = 12, 4  # the last two steps: 0 of 8
    assert proposer.caps([r]) == [1]
    proposer.release(0)  # a new request in the slot starts afresh
    assert proposer.caps([r]) == [None]


def test_the_batch_size_table_and_the_file():
    policy = SpeculationPolicy(by_batch_size=((2, 3), (8, 0)))
    assert [policy.batch_cap(b) for b in (1, 2, 7, 8, 16)] == [None, 3, 3, 0, 0]
    assert SpeculationPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"by_batch_size": {"4": 2, "2": -1}}', "draft nodes must be >= 0"),
        ('{"by_batch_size": {"0": 2}}', "batch sizes must be distinct, ascending and >= 1"),
        ('{"by_batch_size": {"a": 2}}', "must be integers"),
        ('{"min_acceptance": 2}', r"min_acceptance must be in \[0, 1\]"),
        ('{"max_nodes": 2}', "unknown policy keys: max_nodes"),
        ("[1, 2]", "one JSON object"),
        ("{not json", "Expecting property name"),
    ],
)
def test_a_bad_policy_file_is_a_clear_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "policy.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as caught:
        SpeculationPolicy.from_file(path)
    assert str(path) in str(caught.value)


def test_a_method_takes_a_policy_file(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"by_batch_size": {"1": 2, "4": 0}}))
    spec = parse_method(f"ngram:policy={path}")
    proposer = new_proposer(spec, proposer_options(spec, None))
    assert isinstance(proposer, PolicyProposer) and proposer.policy.batch_cap(4) == 0
    assert "policy=" in spec.label


def test_first_nodes_of_a_tree_are_a_tree():
    tree = Draft(torch.tensor([5, 6, 7, 8]), torch.tensor([-1, -1, 0, 2]), torch.rand(4, 10))
    first = tree.first(3)
    assert first.tokens.tolist() == [5, 6, 7] and first.parents.tolist() == [-1, -1, 0] and first.probs.shape[0] == 3
    assert tree.first(9) is tree and len(tree.first(0)) == 0


# -- presets: the method parameters that say "speculate less as the batch grows" -----------------------------------
class BudgetedEagle(EagleProposer):
    """The reference: EAGLE's ``batch_budget`` as the proposer applied it itself before it became a policy preset
    (``budget // batch size`` nodes a row, at least one, the tree narrowed to fit; a policy's cap below that)."""

    def __init__(self, head, target, batch_budget: int, **tree):
        super().__init__(head, target, **tree)
        self.batch_budget = batch_budget

    def propose(self, state: ProposeState) -> list[Draft]:
        self.batch_size = len(state.requests)
        return super().propose(state)

    def tree_shape(self, most: int | None) -> tuple[int, int, int]:
        keep = max(1, min(self.max_draft_tokens, self.batch_budget // self.batch_size))
        if most is not None:
            keep = max(1, min(keep, most))
        return min(self.topk, keep), min(self.num_steps, keep), keep


class SwitchedOff(WrappedProposer):
    """The reference: ``disable_by_batch_size`` as its own proposer applied it before it became a policy preset."""

    def __init__(self, inner: Proposer, max_batch_size: int):
        super().__init__(inner)
        self.max_batch_size = max_batch_size

    def propose(self, state: ProposeState) -> list[Draft]:
        if len(state.requests) > self.max_batch_size:
            return [Draft.empty() for _ in state.requests]
        return self.inner.propose(state)


class Drafts(WrappedProposer):
    """Every step's drafts, row by row, as (tokens, parents)."""

    def __init__(self, inner: Proposer):
        super().__init__(inner)
        self.seen: list[list[tuple[list[int], list[int]]]] = []

    def propose(self, state: ProposeState) -> list[Draft]:
        drafts = self.inner.propose(state)
        self.seen.append([(d.tokens.tolist(), d.parents.tolist()) for d in drafts])
        return drafts


def drafted(target, proposer: Proposer, batch: int) -> tuple[list[list[int]], list]:
    """Outputs and every step's drafts of ``batch`` ragged requests started together (the batch shrinks as they end)."""
    recorder = Drafts(proposer)
    params = [SamplingParams(max_tokens=5 + 4 * i, ignore_eos=True) for i in range(batch)]
    requests = Engine(target, max_batch=batch, max_seq_len=256, proposer=recorder).generate(repetitive_prompts(batch, seed=batch), params)
    return [r.output_ids for r in requests], recorder.seen


@pytest.mark.parametrize("budget", [1, 4, 12])
def test_the_batch_budget_preset_drafts_what_eagles_own_budget_drafted(hf_target, target, tmp_path, budget):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    tree = {"num_steps": 3, "topk": 3, "num_draft_tokens": 8}
    spec = parse_method(f"eagle:batch_budget={budget}")
    for batch in (1, 2, 3, 5):
        preset = new_proposer(spec, {"head": head, "target": target, **tree})
        assert isinstance(preset, PolicyProposer) and preset.policy == SpeculationPolicy.batch_budget(budget)
        expected = drafted(target, BudgetedEagle(head, target, budget, **tree), batch)
        assert drafted(target, preset, batch) == expected, batch


def test_the_presets_and_a_policy_file_together_draft_what_they_drafted_apart(hf_target, target, tmp_path):
    """``eagle:batch_budget=4,disable_by_batch_size=4,policy=FILE``: the file's policy under both presets, one table."""
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    tree = {"num_steps": 3, "topk": 2, "num_draft_tokens": 6}
    policy = SpeculationPolicy(by_batch_size=((1, 4), (3, 3)), min_acceptance=0.6, window=2, probe_nodes=1)
    spec = parse_method("eagle:batch_budget=4,disable_by_batch_size=4")
    for batch in (2, 5):
        combined = new_proposer(spec, {"head": head, "target": target, **tree, "policy": policy})
        assert combined.policy == SpeculationPolicy(((1, 4), (2, 2), (3, 1), (5, 0)), 0.6, 2, 1)
        reference = SwitchedOff(PolicyProposer(BudgetedEagle(head, target, 4, **tree), policy), 4)
        assert drafted(target, combined, batch) == drafted(target, reference, batch), batch


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_the_disable_by_batch_size_preset_drafts_what_the_switch_drafted(target, method):
    options = {
        "ngram": {"num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
        "draft": {"model": tiny_model(seed=3, num_hidden_layers=1), "num_speculative_tokens": 3},
    }[method]
    spec = parse_method(f"{method}:disable_by_batch_size=2")
    for batch in (1, 3, 5):
        preset = new_proposer(spec, options)
        assert preset.policy == SpeculationPolicy.disable_by_batch_size(2) == SpeculationPolicy(((3, 0),))
        assert drafted(target, preset, batch) == drafted(target, SwitchedOff(make_proposer(method, **options), 2), batch)


def test_the_presets_tables():
    assert SpeculationPolicy.batch_budget(4).by_batch_size == ((1, 4), (2, 2), (3, 1))
    assert [SpeculationPolicy.batch_budget(12).batch_cap(b) for b in (1, 2, 3, 4, 5, 6, 7, 12, 13, 99)] == [12, 6, 4, 3, 2, 2, 1, 1, 1, 1]
    assert SpeculationPolicy.disable_by_batch_size(8).by_batch_size == ((9, 0),)
    floor = SpeculationPolicy(((2, 3),), min_acceptance=0.5)
    assert floor.capped_by(SpeculationPolicy.batch_budget(4)) == SpeculationPolicy(((1, 4), (2, 2), (3, 1)), min_acceptance=0.5)
    with pytest.raises(ValueError, match="only one"):
        SpeculationPolicy.batch_budget(4).capped_by(floor)
    for preset, name in [(SpeculationPolicy.batch_budget, "batch_budget"), (SpeculationPolicy.disable_by_batch_size, "disable_by")]:
        with pytest.raises(ValueError, match=f"{name}.* must be at least 1"):
            preset(0)


@pytest.mark.parametrize("method", ["draft", "eagle"])
@pytest.mark.parametrize("limit", [1, 2])
def test_disable_by_batch_size_decodes_plainly_above_it_and_resumes_losslessly(tmp_path, hf_target, target, method, limit):
    if method == "eagle":
        head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
        inner = make_proposer("eagle", head=head, target=target, num_steps=3, topk=2, num_draft_tokens=5)
    else:
        inner = make_proposer("draft", model=tiny_model(seed=3, num_hidden_layers=1), num_speculative_tokens=3)
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (5, 9, 4, 12)]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 20, 9, 24)]
    base = Engine(target, max_batch=3, max_seq_len=128).generate(prompts, params)
    limited = PolicyProposer(inner, SpeculationPolicy.disable_by_batch_size(limit))
    spec = Engine(target, max_batch=3, max_seq_len=128, proposer=limited).generate(prompts, params)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert sum(r.stats.steps - r.stats.drafts for r in spec) > 0  # steps without a draft: three requests ran at once
    assert sum(r.stats.draft_nodes for r in spec) > 0  # it speculated once the batch shrank


def test_the_presets_are_method_parameters_and_keep_their_labels():
    spec = parse_method("ngram:disable_by_batch_size=4")
    assert (
        spec.params["disable_by_batch_size"] == 4
        and spec.label == "ngram(num_speculative_tokens=4,prompt_lookup_min=2,prompt_lookup_max=5,disable_by_batch_size=4)"
    )
    assert parse_method("eagle").params["disable_by_batch_size"] is None
    recorded = "eagle(num_steps=3,topk=2,num_draft_tokens=4,batch_budget=4,draft_vocab=auto)"  # results.jsonl's label
    assert parse_method("eagle").label == recorded
    assert parse_method("eagle:num_steps=3,topk=2,num_draft_tokens=4,batch_budget=4,draft_vocab=auto").label == recorded
    assert parse_method("eagle:batch_budget=none").params["batch_budget"] is None
    plain = new_proposer(parse_method("ngram"), {"num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5})
    assert type(plain) is NgramProposer  # no preset and no policy file: nothing wraps it
