"""The method table's drafter rule: a target other than the embedded model needs its own drafter, in every command."""

import pytest

from speculab.methods import parse_method, require_own_drafter


@pytest.mark.parametrize(
    "method,option,said",
    [("eagle", "--{key} PATH", "--eagle PATH"), ("draft", "{key}=PATH", "draft=PATH"), ("eagle3", "--draft PATH", "--draft PATH")],
)
def test_a_shipped_drafter_is_refused_with_the_commands_own_words(method, option, said):
    with pytest.raises(ValueError, match=f"--method {method} needs {said}: the shipped drafters are for the embedded model"):
        require_own_drafter(parse_method(method), option)


def test_an_own_drafter_or_none_passes(tmp_path):
    require_own_drafter(parse_method(f"eagle:eagle={tmp_path}"), "--{key} PATH")
    require_own_drafter(parse_method("ngram"), "--{key} PATH")
    require_own_drafter(parse_method("baseline"), "--{key} PATH")
