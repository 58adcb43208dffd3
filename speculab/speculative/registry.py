"""Every proposer by its method name, in one explicit table that ``make_proposer`` reads.

Knows: which class serves which name (``methods.METHODS`` uses the same names for its parameters and defaults).
Does not know: a method's default parameters (``methods.METHODS`` is their one home), or how a proposer works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from speculab.speculative.draft_model import DraftModelProposer
from speculab.speculative.eagle import Eagle3Proposer, EagleProposer, StaticTreeEagleProposer
from speculab.speculative.ngram import NgramProposer
from speculab.speculative.proposer import Proposer
from speculab.speculative.suffix import SuffixProposer

PROPOSERS: dict[str, Callable[..., Proposer]] = {
    "baseline": Proposer,
    "ngram": NgramProposer,
    "suffix": SuffixProposer,
    "draft": DraftModelProposer,
    "eagle": EagleProposer,
    "eagle3": Eagle3Proposer,
    "eagle-static": StaticTreeEagleProposer,
}


def make_proposer(name: str, **options: Any) -> Proposer:
    """Build the proposer called ``name``; unknown names and options are clear errors."""
    if name not in PROPOSERS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(PROPOSERS))}")
    return PROPOSERS[name](**options)
