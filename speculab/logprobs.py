"""What each emitted token reports: its log-probability under the target, and the target's most likely tokens there.

Knows: the target's raw distribution at an output position, log_softmax of the logits that position's token was chosen
from (vLLM's default ``raw_logprobs``: before temperature, top-k and top-p), whichever way the token came (plain
decoding, an accepted draft token, the bonus or the recovered token): never a drafter's. Does not know: how tokens
are chosen, or how a server writes them (``serve/logprobs_format.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob) of the most likely tokens there, most likely first


def token_logprobs(
    logits: Tensor,  # [n, vocab]: the target's logits each token was chosen from
    tokens: list[int],  # [n]
    top: int,  # how many of the most likely tokens to report (0: none)
) -> list[TokenLogprob]:
    """Each token's logprob under the target's raw distribution, and the ``top`` most likely tokens there."""
    lp = logits.float().log_softmax(-1)
    chosen = lp[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)].tolist()
    if top == 0:
        return [TokenLogprob(t, c, ()) for t, c in zip(tokens, chosen)]
    values, ids = lp.topk(top, dim=-1)
    return [
        TokenLogprob(t, c, tuple(zip(i, v))) for t, c, i, v in zip(tokens, chosen, ids.tolist(), values.tolist())
    ]  # fmt: skip
