"""A choice's logprobs as OpenAI's and vLLM's APIs write them.

Knows: the completions shape (``tokens``, ``token_logprobs``, ``top_logprobs``: the token's and the most likely tokens'
logprobs by text, ``text_offset``) and the chat shape (``content``: each token with its ``logprob``, UTF-8 ``bytes``
and ``top_logprobs``), each token written as the tokenizer decodes it alone. Does not know: how the logprobs were
computed (``speculab/logprobs.py``: the target's raw distribution) or how a response is sent (``responses.py``).
"""

from __future__ import annotations

from speculab.logprobs import TokenLogprob

CHAT = "chat.completion"


def completion_logprobs(items: list[TokenLogprob], decode, offset: int) -> dict:
    """``decode``: token id -> its text; ``offset``: the characters of the choice's text before these tokens."""
    tokens = [decode(t.token_id) for t in items]
    offsets = []
    for text in tokens:
        offsets.append(offset)
        offset += len(text)
    # vLLM's: the chosen token's logprob beside the most likely tokens'
    tops = [{decode(i): lp for i, lp in ((t.token_id, t.logprob), *t.top)} for t in items]
    return {"tokens": tokens, "token_logprobs": [t.logprob for t in items], "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(items: list[TokenLogprob], decode) -> dict:
    def entry(token_id: int, logprob: float) -> dict:
        text = decode(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [entry(t.token_id, t.logprob) | {"top_logprobs": [entry(i, lp) for i, lp in t.top]} for t in items]}


def choice_logprobs(kind: str, items: list[TokenLogprob] | None, decode, offset: int = 0) -> dict | None:
    """The ``logprobs`` of a choice (or of one streamed chunk's): None where the request asked for none."""
    if items is None:
        return None
    return chat_logprobs(items, decode) if kind == CHAT else completion_logprobs(items, decode, offset)
