"""A speculation policy cuts each request's draft to its budget at the step's load (batch size, context length) and by
its own acceptance: never more than the budget, and every method still gives the baseline's greedy tokens whatever
the policy does mid-request."""

import json

import pytest
import torch

from speculab.engine import Engine
from speculab.methods import make_proposer, new_proposer, parse_method, proposer_options, speculation_policy
from speculab.models.eagle_head import load_eagle_head
from speculab.policy.table import BudgetRule, Load, SpeculationPolicy
from speculab.sampling import SamplingParams
from speculab.speculative.eagle import EagleProposer
from speculab.speculative.policy_proposer import PolicyProposer
from speculab.speculative.proposer import Proposer, ProposeState, WrappedProposer
from speculab.speculative.tree import Draft
from tests.helpers import tiny_model, write_eagle_head
from tests.speculative.test_lossless import repetitive_prompts

# budgets change with the batch size (8 ragged requests finish one by one) and with each request's acceptance
POLICY = SpeculationPolicy.by_batch_size({1: 4, 3: 2, 6: 0}, min_acceptance=0.6, window=2, probe_nodes=1)


def proposers(hf_target, target, tmp_path):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    return {
        "ngram": make_proposer("ngram", num_speculative_tokens=4, prompt_lookup_min=1, prompt_lookup_max=3),
        "draft": make_proposer("draft", model=tiny_model(seed=11), num_speculative_tokens=4),
        "draft-self": make_proposer("draft", model=target, num_speculative_tokens=4),
        "eagle": make_proposer("eagle", head=head, target=target, num_steps=3, topk=3, num_draft_tokens=8),
    }


class Recording(PolicyProposer):
    """The policy proposer, recording each step's batch size, budgets, draft sizes and context lengths."""

    def propose(self, state: ProposeState) -> list[Draft]:
        drafts = super().propose(state)
        contexts = [len(r.prompt_ids) + len(r.output_ids) for r in state.requests]
        self.steps = getattr(self, "steps", []) + [(len(state.requests), self.last_budgets, [len(d) for d in drafts], contexts)]
        return drafts

    def budgets(self, requests):
        self.last_budgets = super().budgets(requests)
        return self.last_budgets


@pytest.mark.parametrize("method", ["ngram", "draft", "draft-self", "eagle"])
def test_greedy_identical_to_baseline_under_a_policy_that_changes_mid_request(hf_target, target, tmp_path, method):
    prompts = repetitive_prompts(8, seed=3)
    params = [SamplingParams(max_tokens=4 + 5 * i, ignore_eos=True) for i in range(8)]  # they finish one by one
    proposer = Recording(proposers(hf_target, target, tmp_path)[method], POLICY)
    got = Engine(target, max_batch=8, max_seq_len=256, proposer=proposer).generate(prompts, params)
    expected = Engine(target, max_batch=8, max_seq_len=256).generate(prompts, params)
    assert [r.output_ids for r in got] == [r.output_ids for r in expected]
    for batch, budgets, sizes, _ in proposer.steps:
        assert all(c is None or n <= c for c, n in zip(budgets, sizes))  # never past a budget
        if batch >= 6:
            assert sizes == [0] * batch  # a budget of 0: plain decoding
    assert any(batch < 6 and sum(sizes) for batch, _, sizes, _ in proposer.steps)  # and it speculated below that


@pytest.mark.parametrize("method", ["ngram", "draft", "eagle"])
def test_a_budget_keyed_on_context_length_follows_each_request_as_it_grows(hf_target, target, tmp_path, method):
    """Up to 3 nodes a request below 40 tokens of context, plain decoding from 40 on at batch 1-2 and from 30 on at
    batch 3 and more: each request's budget changes mid-request, and the output is still the baseline's."""
    rules = (BudgetRule(1, 0, 3), BudgetRule(1, 40, 0), BudgetRule(3, 0, 3), BudgetRule(3, 30, 0))
    proposer = Recording(proposers(hf_target, target, tmp_path)[method], SpeculationPolicy(rules))
    prompts = repetitive_prompts(4, seed=5)
    params = [SamplingParams(max_tokens=12 + 6 * i, ignore_eos=True) for i in range(4)]
    got = Engine(target, max_batch=4, max_seq_len=256, proposer=proposer).generate(prompts, params)
    expected = Engine(target, max_batch=4, max_seq_len=256).generate(prompts, params)
    assert [r.output_ids for r in got] == [r.output_ids for r in expected]
    seen = set()
    for batch, budgets, sizes, contexts in proposer.steps:
        for budget, size, context in zip(budgets, sizes, contexts):
            wanted = 3 if context < (40 if batch < 3 else 30) else 0
            assert budget == wanted and size <= budget
            seen.add(wanted)
    assert seen == {0, 3}  # both sides of the context threshold were reached


def test_a_request_that_stops_being_accepted_drafts_probe_nodes():
    policy = SpeculationPolicy(min_acceptance=0.5, window=2, probe_nodes=1)
    proposer = PolicyProposer(Proposer(), policy)

    class Request:
        def __init__(self):
            self.slot, self.prompt_ids, self.output_ids = 0, [1, 2, 3], []
            self.stats = type("S", (), {"draft_nodes": 0, "accepted_tokens": 0})()

    r = Request()
    assert proposer.budgets([r]) == [None]  # nothing drafted yet
    for drafted, accepted in [(4, 4), (8, 4)]:  # 4 of 4, then 0 of 4: 4/8 = 0.5, not below
        r.stats.draft_nodes, r.stats.accepted_tokens = drafted, accepted
        budget = proposer.budgets([r])
    assert budget == [None]
    r.stats.draft_nodes, r.stats.accepted_tokens = 12, 4  # the last two steps: 0 of 8
    assert proposer.budgets([r]) == [1]
    proposer.release(0)  # a new request in the slot starts afresh
    assert proposer.budgets([r]) == [None]


def test_a_method_takes_a_policy_file(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"draft_budget": [{"batch_size": 1, "draft_nodes": 2}, {"batch_size": 4, "draft_nodes": 0}]}))
    spec = parse_method(f"ngram:policy={path}")
    proposer = new_proposer(spec, proposer_options(spec, None))
    assert isinstance(proposer, PolicyProposer) and proposer.policy.draft_budget(Load(4)) == 0
    assert "policy=" in spec.label


def test_first_nodes_of_a_tree_are_a_tree():
    tree = Draft(torch.tensor([5, 6, 7, 8]), torch.tensor([-1, -1, 0, 2]), torch.rand(4, 10))
    first = tree.first(3)
    assert first.tokens.tolist() == [5, 6, 7] and first.parents.tolist() == [-1, -1, 0] and first.probs.shape[0] == 3
    assert tree.first(9) is tree and len(tree.first(0)) == 0


# -- named policies: shared:B and plain_above:N, against the proposers that applied them before they were policies --
class BudgetedEagle(EagleProposer):
    """The reference: ``shared:B`` as EAGLE applied it itself before it was a policy (``B // batch size`` nodes a
    row, at least one, the tree narrowed to fit; a smaller budget below that)."""

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
    """The reference: ``plain_above:N`` as its own proposer applied it before it was a policy."""

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
def test_the_shared_policy_drafts_what_eagles_own_budget_drafted(hf_target, target, tmp_path, budget):
    head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
    tree = {"num_steps": 3, "topk": 3, "num_draft_tokens": 8}
    spec = parse_method(f"eagle:policy=shared:{budget}")
    for batch in (1, 2, 3, 5):
        preset = new_proposer(spec, {"head": head, "target": target, **tree, "policy": speculation_policy(spec, None)})
        assert isinstance(preset, PolicyProposer) and preset.policy == SpeculationPolicy.shared(budget)
        expected = drafted(target, BudgetedEagle(head, target, budget, **tree), batch)
        assert drafted(target, preset, batch) == expected, batch


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_the_plain_above_policy_drafts_what_the_switch_drafted(target, method):
    options = {
        "ngram": {"num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
        "draft": {"model": tiny_model(seed=3, num_hidden_layers=1), "num_speculative_tokens": 3},
    }[method]
    spec = parse_method(f"{method}:policy=plain_above:2")
    for batch in (1, 3, 5):
        preset = new_proposer(spec, options | {"policy": speculation_policy(spec, None)})
        assert preset.policy == SpeculationPolicy.plain_above(2) == SpeculationPolicy((BudgetRule(3, 0, 0),))
        assert drafted(target, preset, batch) == drafted(target, SwitchedOff(make_proposer(method, **options), 2), batch)


@pytest.mark.parametrize("method", ["draft", "eagle"])
@pytest.mark.parametrize("limit", [1, 2])
def test_plain_above_decodes_plainly_above_it_and_resumes_losslessly(tmp_path, hf_target, target, method, limit):
    if method == "eagle":
        head = load_eagle_head(write_eagle_head(tmp_path, hf_target.config), target)
        inner = make_proposer("eagle", head=head, target=target, num_steps=3, topk=2, num_draft_tokens=5)
    else:
        inner = make_proposer("draft", model=tiny_model(seed=3, num_hidden_layers=1), num_speculative_tokens=3)
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (5, 9, 4, 12)]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 20, 9, 24)]
    base = Engine(target, max_batch=3, max_seq_len=128).generate(prompts, params)
    limited = PolicyProposer(inner, SpeculationPolicy.plain_above(limit))
    spec = Engine(target, max_batch=3, max_seq_len=128, proposer=limited).generate(prompts, params)
    assert [r.output_ids for r in spec] == [r.output_ids for r in base]
    assert sum(r.stats.steps - r.stats.drafts for r in spec) > 0  # steps without a draft: three requests ran at once
    assert sum(r.stats.draft_nodes for r in spec) > 0  # it speculated once the batch shrank
