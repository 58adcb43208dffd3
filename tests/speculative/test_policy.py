"""A speculation policy caps each request's draft by the batch size and by its own acceptance: never more than the
cap, and every method still gives the baseline's greedy tokens whatever the policy does mid-request."""

import json

import pytest
import torch

from speculab.engine import Engine
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.models.eagle_head import load_eagle_head
from speculab.sampling import SamplingParams
from speculab.speculative.policy import PolicyProposer, SpeculationPolicy
from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.registry import make_proposer
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
