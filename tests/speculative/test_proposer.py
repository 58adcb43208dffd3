"""The proposer interface: a wrapped proposer is the inner one in every part of it, and a step's draft budgets."""

from speculab.methods import make_proposer
from speculab.policy.table import SpeculationPolicy
from speculab.speculative.policy_proposer import PolicyProposer
from speculab.speculative.proposer import Proposer, ProposeState, WrappedProposer
from tests.helpers import tiny_model


def test_a_wrapped_proposer_has_the_inner_ones_interface_and_nothing_else():
    inner = make_proposer("draft", model=tiny_model(seed=3, num_hidden_layers=1), num_speculative_tokens=3)
    for wrapped in (WrappedProposer(inner), PolicyProposer(inner, SpeculationPolicy.plain_above(2))):
        assert isinstance(wrapped, Proposer)
        assert (wrapped.name, wrapped.max_draft_tokens, wrapped.headroom) == ("draft", 3, inner.headroom)
        assert (wrapped.needs_features, wrapped.feature_layers, wrapped.prompt_cache_key) == (False, (), inner.prompt_cache_key)
        assert hasattr(inner, "k") and not hasattr(wrapped, "k")  # only the interface is forwarded, nothing else


def test_the_largest_budget_of_a_step_is_none_while_any_row_has_none():
    assert ProposeState([]).largest_budget() is None
    assert ProposeState([], [2, None]).largest_budget() is None
    assert ProposeState([], [2, 0, 5]).largest_budget() == 5
