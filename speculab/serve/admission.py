"""From a request body and its prompt's token ids to a request in the engine's queue, or a 4xx naming the field.

Knows: what the server refuses before a request reaches the engine (another model's name, an empty or too long
prompt, token ids outside the vocabulary, sampling settings the engine's check refuses, a full queue) and how each
refusal reads. Does not know: HTTP routes or responses (``routes.py``, ``responses.py``), or the fields' own ranges
(``protocol.py``).
"""

from __future__ import annotations

from speculab.engine import sequence_length
from speculab.serve.errors import ApiError
from speculab.serve.protocol import Unsupported
from speculab.serve.state import ServeState
from speculab.serve.worker import Handle, QueueFull

SAMPLING_FIELDS = ("max_tokens", "seed", "temperature", "top_p", "top_k", "sampling_verify")  # named in the engine's ValueErrors


def refuse_unsupported(body) -> None:
    """A 400 for a field OpenAI defines and this server does not implement (``protocol.Unsupported``)."""
    try:
        body.refuse_unsupported()
    except Unsupported as err:
        raise ApiError(400, str(err), err.param) from None


def check_token_ids(state: ServeState, prompt_ids: list[int]) -> None:
    """A prompt given as token ids must lie in the vocabulary."""
    if prompt_ids and (min(prompt_ids) < 0 or max(prompt_ids) >= state.vocab_size):
        raise ApiError(400, f"prompt token ids must be in [0, {state.vocab_size})", "prompt")


def output_room(state: ServeState, prompt_ids: list[int]) -> int:
    """Output tokens the context leaves after this prompt (a 400 when it leaves none)."""
    info = state.info
    if not prompt_ids:
        raise ApiError(400, "the prompt is empty after tokenization", "prompt")
    room = info.max_model_len - sequence_length(len(prompt_ids), 0, state.worker.engine.proposer)
    if room < 1:
        raise ApiError(
            400,
            f"the prompt has {len(prompt_ids)} tokens; this server's context is {info.max_model_len} tokens "
            "(--max-model-len), with room left for at least one output token",
            "prompt",
        )
    return room


def check_model(state: ServeState, model: str | None) -> None:
    """A 404 for another model's name (None: a route where the name is optional, as vLLM's /tokenize)."""
    if model is not None and model != state.info.model_name:
        raise ApiError(404, f"The model `{model}` does not exist; this server serves `{state.info.model_name}`", "model")


def submit(state: ServeState, body, prompt_ids: list[int], max_tokens: int | None) -> Handle:
    """Queue the request; ``max_tokens`` None means all the room the context leaves."""
    info = state.info
    check_model(state, body.model)
    room = output_room(state, prompt_ids)
    if any(t >= state.vocab_size for t in body.stop_token_ids or ()):
        raise ApiError(400, f"stop_token_ids must be in [0, {state.vocab_size})", "stop_token_ids")
    try:
        params = body.sampling(max_tokens if max_tokens is not None else room, state.worker.engine.default_stop_ids, info.sampling_verify)
        return state.worker.submit(prompt_ids, params)
    except ValueError as err:
        param = next((f for f in SAMPLING_FIELDS if f in str(err)), None)
        raise ApiError(400, f"{err} (the context is {info.max_model_len} tokens: prompt + max_tokens must fit)", param) from None
    except QueueFull as err:
        raise ApiError(429, str(err)) from None


def submit_all(state: ServeState, body, prompts: list[list[int]], max_tokens: int | None) -> list[Handle]:
    """Queue every prompt of one request, or none: a refusal of any aborts those already queued."""
    handles: list[Handle] = []
    try:
        for prompt_ids in prompts:
            handles.append(submit(state, body, prompt_ids, max_tokens))
    except ApiError:
        for handle in handles:
            state.worker.abort(handle)
        raise
    return handles
