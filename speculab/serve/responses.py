"""A queued request's answer: one JSON body, or Server-Sent Events, in OpenAI's shapes with vLLM's per-request
speculation figures.

Knows: the completion and chat shapes (``choices``, ``usage``, ``metrics.speculative_decoding``), streaming with
``stream_options.include_usage``, stop strings (``text.py``), and that a request whose client goes away mid-answer,
streaming or not, is aborted so the engine frees its slot at its next step. Does not know: how a request was admitted
(``admission.py``) or how the engine decodes.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request
from sse_starlette import EventSourceResponse

from speculab.logprobs import TokenLogprob
from speculab.serve.errors import ApiError, error_body
from speculab.serve.logprobs_format import CHAT, choice_logprobs  # CHAT: one name for the chat shape
from speculab.serve.state import ServeState
from speculab.serve.text import TextStream
from speculab.serve.worker import Handle, Output
from speculab.speculative.stats import SpecStats


@dataclass(frozen=True)
class Answer:
    """One request's answer being written: what every chunk and body repeats."""

    state: ServeState
    handle: Handle
    kind: str  # "text_completion" or "chat.completion"
    id: str
    created: int

    def envelope(self, kind: str, **fields) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.state.info.model_name, **fields}

    def decode(self, token_id: int) -> str:
        """One token's text, as a choice's logprobs name it."""
        return self.state.tokenizer.decode([token_id])


def spec_metrics(stats: SpecStats) -> dict:
    """The per-response speculation figures, in vLLM's per-request names."""
    return {
        "speculative_decoding": {
            "num_drafts": stats.drafts,
            "num_draft_tokens": stats.drafted_depth,
            "num_draft_nodes": stats.draft_nodes,
            "num_accepted_draft_tokens": stats.accepted_tokens,
            "num_accepted_tokens_per_pos": stats.accepted_per_position,
            "num_verify_steps": stats.steps,
            "draft_acceptance_rate": stats.acceptance_rate,
            "mean_acceptance_length": stats.mean_acceptance_length,
        }
    }


async def respond(state: ServeState, body, handle: Handle, request: Request, kind: str, prefix: str):
    """The answer to a queued request: an event stream when the body asks for one, else one JSON body."""
    answer = Answer(state, handle, kind, f"{prefix}-{uuid.uuid4().hex}", int(time.time()))
    text = TextStream(state.tokenizer, body.stop)
    if body.stream:
        # events end in "\n\n" as vLLM's do: clients that split on it (vLLM's own benchmark) lose none to "\r\n\r\n"
        events = stream_events(answer, text, body.include_usage, body.usage_in_every_chunk)
        return EventSourceResponse(events, ping=15, sep="\n")
    try:
        reason, pieces, logprobs = await collect(answer, text, request)
    finally:
        state.worker.abort(handle)  # a no-op once finished; frees the slot when the client left early
    choices = [choice(kind, "".join(pieces), reason, delta=False, logprobs=choice_logprobs(kind, logprobs, answer.decode))]
    return answer.envelope(kind, choices=choices, usage=usage(handle), metrics=spec_metrics(handle.stats), **sampled_with(handle))


async def collect(answer: Answer, text: TextStream, request: Request | None) -> tuple[str, list[str], list[TokenLogprob] | None]:
    """Every output of a non-streamed request: (finish reason, text pieces, each token's logprobs where asked).
    ``request``: the HTTP request whose disconnect aborts it (None: the caller watches)."""
    pieces: list[str] = []
    logprobs = [] if answer.handle.params.logprobs is not None else None
    watcher = asyncio.create_task(abort_on_disconnect(answer.state, [answer.handle], request)) if request is not None else None
    try:
        while True:
            out: Output = await answer.handle.outputs.get()
            reason = consume(answer, out, text, pieces)
            if logprobs is not None and out.logprobs:
                logprobs += out.logprobs
            if reason is not None:
                return reason, pieces, logprobs
    finally:
        if watcher is not None:
            watcher.cancel()


async def abort_on_disconnect(state: ServeState, handles: list[Handle], request: Request) -> None:
    """Abort the requests as soon as their client goes (the body is read, so the next ASGI message is the
    disconnect); the engine frees the slots at its next step and the last output ends each ``collect``."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    for handle in handles:
        state.worker.abort(handle)


def consume(answer: Answer, out: Output, text: TextStream, pieces: list[str]) -> str | None:
    """Add one output's text to ``pieces``; returns the finish reason once the request is over."""
    if out.error is not None:
        raise ApiError(500, out.error)
    pieces.append(text.push(out.token_ids))
    if text.stopped:
        answer.state.worker.abort(answer.handle, reason="stop")
        return "stop"
    if out.finish_reason is not None:
        pieces.append(text.flush())
        return out.finish_reason
    return None


def usage(handle: Handle) -> dict:
    """Token counts, and (OpenAI's and vLLM's field) how many prompt tokens the prompt cache held."""
    n_out = len(handle.request.output_ids) if handle.request else 0
    cached = handle.request.cached_tokens if handle.request else 0
    counts = {"prompt_tokens": len(handle.prompt_ids), "completion_tokens": n_out, "total_tokens": len(handle.prompt_ids) + n_out}
    return counts | {"prompt_tokens_details": {"cached_tokens": cached}}


def sampled_with(handle: Handle) -> dict:
    """A coupled request's seed (the one it named, or the one drawn for it): sent again, it gives the same text."""
    noise = handle.request.noise if handle.request is not None else None
    return {} if noise is None else {"sampling": {"sampling_verify": "coupled", "seed": noise.seed}}


def choice(kind: str, text: str, reason: str | None, delta: bool, logprobs: dict | None = None, index: int = 0) -> dict:
    if kind == CHAT:
        key = "delta" if delta else "message"
        content = {"content": text} if delta else {"role": "assistant", "content": text}
        return {"index": index, key: content, "logprobs": logprobs, "finish_reason": reason}
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}


async def stream_events(
    answer: Answer, text: TextStream, include_usage: bool, every_chunk: bool = False, index: int = 0, last: bool = True
) -> AsyncIterator[dict]:
    """The Server-Sent Events of a streamed request, ``[DONE]`` last; an engine error ends it as an error event.
    ``include_usage``: a last chunk with the usage and no choices; ``every_chunk``: the usage so far in every chunk too
    (vLLM's ``continuous_usage_stats``); ``index``: its choice's; ``last`` False: one prompt of several, whose events
    end without ``[DONE]`` (``several_prompts.py`` ends the stream)."""
    chunk_kind = "chat.completion.chunk" if answer.kind == CHAT else "text_completion"

    def chunk(choices: list, **extra) -> dict:
        so_far = {"usage": usage(answer.handle)} if every_chunk and "usage" not in extra else {}
        return {"data": to_json(answer.envelope(chunk_kind, choices=choices, **extra, **so_far))}

    role_due = answer.kind == CHAT  # as vLLM: the role comes with the first output, so time to first chunk is TTFT
    offset = 0  # characters sent so far: the completions shape's text_offset
    wants = answer.handle.params.logprobs is not None
    pending: list[TokenLogprob] = []  # the logprobs of tokens whose text is held back (a stop string may follow)
    try:
        while True:
            pieces: list[str] = []
            try:
                out = await answer.handle.outputs.get()
                reason = consume(answer, out, text, pieces)
            except ApiError as err:
                yield {"data": to_json(error_body(err.status, err.message))}
                break
            if role_due:
                yield chunk([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
                role_due = False
            pending += out.logprobs or []
            if piece := "".join(pieces):
                logprobs = choice_logprobs(answer.kind, pending if wants else None, answer.decode, offset)
                yield chunk([choice(answer.kind, piece, None, delta=True, logprobs=logprobs, index=index)])
                offset, pending = offset + len(piece), []
            if reason is not None:
                ending = {"metrics": spec_metrics(answer.handle.stats), **sampled_with(answer.handle)}
                logprobs = choice_logprobs(answer.kind, pending, answer.decode, offset) if wants and pending else None
                yield chunk([choice(answer.kind, "", reason, delta=True, logprobs=logprobs, index=index)], **ending)
                if include_usage:
                    yield chunk([], usage=usage(answer.handle))
                break
        if last:
            yield {"data": "[DONE]"}
    finally:  # also when the client disconnects and the generator is cancelled
        answer.state.worker.abort(answer.handle)


def to_json(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))
