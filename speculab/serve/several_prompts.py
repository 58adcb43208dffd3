"""A completion request with several prompts: one choice each, as OpenAI's and vLLM's ``/v1/completions`` answer.

Knows: every prompt runs as its own engine request (each under the same sampling settings and seed), choice ``i`` is
prompt ``i``'s, the usage and speculation figures are summed over them, a streamed answer interleaves their chunks
as they come and ends once all have, and a client that goes away aborts all of them. Does not know: how one answer is
written (``responses.py``) or how a request is admitted (``admission.py``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import Request
from sse_starlette import EventSourceResponse

from speculab.serve.logprobs_format import choice_logprobs
from speculab.serve.responses import Answer, abort_on_disconnect, choice, collect, spec_metrics, stream_events, to_json, usage
from speculab.serve.state import ServeState
from speculab.serve.text import TextStream
from speculab.serve.worker import Handle
from speculab.speculative.stats import SpecStats

KIND = "text_completion"


def summed_usage(handles: list[Handle]) -> dict:
    """Every count summed over the prompts, the cached tokens inside ``prompt_tokens_details`` too."""
    each = [usage(h) for h in handles]
    counts = {key: sum(u[key] for u in each) for key in each[0] if key != "prompt_tokens_details"}
    return counts | {"prompt_tokens_details": {"cached_tokens": sum(u["prompt_tokens_details"]["cached_tokens"] for u in each)}}


def summed_stats(handles: list[Handle]) -> SpecStats:
    total = SpecStats()
    for h in handles:
        total.merge(h.stats)
    return total


async def respond_several(state: ServeState, body, handles: list[Handle], request: Request):
    """The answer to a completion request of several prompts (``handles`` in prompt order)."""
    answer_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    answers = [Answer(state, h, KIND, answer_id, created) for h in handles]
    if body.stream:
        return EventSourceResponse(merged_events(answers, body), ping=15, sep="\n")
    watcher = asyncio.create_task(abort_on_disconnect(state, handles, request))
    try:
        done = await asyncio.gather(*(collect(a, TextStream(state.tokenizer, body.stop), None) for a in answers))
    finally:
        watcher.cancel()
        for h in handles:
            state.worker.abort(h)  # a no-op once finished
    choices = [
        choice(KIND, "".join(pieces), reason, delta=False, logprobs=choice_logprobs(KIND, logprobs, a.decode), index=i)
        for i, (a, (reason, pieces, logprobs)) in enumerate(zip(answers, done))
    ]
    return answers[0].envelope(KIND, choices=choices, usage=summed_usage(handles), metrics=spec_metrics(summed_stats(handles)))


async def merged_events(answers: list[Answer], body) -> AsyncIterator[dict]:
    """Every prompt's chunks as they come (choice ``index`` = the prompt's), then the summed usage and ``[DONE]``."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, answer: Answer) -> None:
        try:
            text = TextStream(answer.state.tokenizer, body.stop)
            async for event in stream_events(answer, text, False, body.usage_in_every_chunk, index=index, last=False):
                await queue.put(event)
        finally:
            await queue.put(None)  # this prompt is done

    tasks = [asyncio.create_task(pump(i, a)) for i, a in enumerate(answers)]
    try:
        running = len(tasks)
        while running:
            event = await queue.get()
            if event is None:
                running -= 1
            else:
                yield event
        if body.include_usage:
            summed = summed_usage([a.handle for a in answers])
            yield {"data": to_json(answers[0].envelope(KIND, choices=[], usage=summed))}
        yield {"data": "[DONE]"}
    finally:  # the client left: every prompt's request is aborted
        for task in tasks:
            task.cancel()
        for a in answers:
            a.state.worker.abort(a.handle)
