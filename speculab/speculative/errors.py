"""What can be wrong between a drafter and its target, named once for every proposer.

Knows: the error types callers catch (a server answers them with a clear message, a benchmark skips the cell).
Does not know: which proposer raised one, or how to fix it.
"""


class VocabularyMismatchError(ValueError):
    """Proposer and target disagree on the vocabulary."""
