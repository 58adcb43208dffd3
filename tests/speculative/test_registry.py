"""The proposer table: every method the command line knows has its proposer, named once."""

import pytest

from speculab.methods import METHODS
from speculab.speculative.proposer import Proposer
from speculab.speculative.registry import PROPOSERS, make_proposer


def test_every_method_has_a_proposer_of_its_name():
    assert set(METHODS) <= set(PROPOSERS)
    assert set(PROPOSERS) - set(METHODS) == {"eagle-static"}  # the fixed tree: a library option, not a method flag
    for name, factory in PROPOSERS.items():
        assert issubclass(factory, Proposer), name
        assert factory.name == name or (name, factory.name) == ("eagle-static", "eagle"), name


def test_unknown_names_and_options_are_clear_errors():
    with pytest.raises(ValueError, match="unknown method 'medusa'; known: baseline, draft, eagle"):
        make_proposer("medusa")
    with pytest.raises(TypeError, match="num_speculative_token"):
        make_proposer("ngram", num_speculative_token=3)
