"""Counting a token frequency ranking at training time: which target tokens a reduced draft vocabulary keeps.

Knows: counting tokens over the self-distilled training sequences and the training share of the code sources
(never the benchmark's files). Does not know: what a reduced draft vocabulary is, the file the ranking is kept in
or how a drafter reads it back (``models/draft_vocab.py``, their one home).
"""

from __future__ import annotations

from collections import Counter

import torch

from speculab.train.training_prompts import training_files

DOMAINS = ("python", "typescript", "sql")


def rank_tokens(tokenizer, sequences: list[dict], chars_per_domain: int = 2_000_000) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids in falling frequency [n], their counts [n]) over the sequences and the training sources.

    Each domain's training files are read in sorted order up to ``chars_per_domain`` characters, so the
    ranking is reproducible and no domain dominates by its size. Ties are broken by token id.
    """

    counts: Counter[int] = Counter()
    for s in sequences:
        counts.update(s["prompt_ids"])
        counts.update(s["response_ids"])
    for domain in DOMAINS if chars_per_domain > 0 else ():
        taken = 0
        for f in training_files(domain):
            if taken >= chars_per_domain:
                break
            text = f.text[: chars_per_domain - taken]
            counts.update(tokenizer.encode(text))
            taken += len(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return torch.tensor([t for t, _ in ranked], dtype=torch.int64), torch.tensor([c for _, c in ranked], dtype=torch.int64)
