"""The routes of ``speculab serve``: the ones a client of ``vllm serve`` uses, each a named function.

``router``: ``/health``, ``/metrics`` (Prometheus, vLLM's names), ``/version``, ``/tokenize`` and ``/detokenize``
(vLLM's: outside ``/v1``, so outside the key check too, as vLLM's are; ``vllm bench serve`` calls them keyless). ``v1``: ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions``, behind the optional Bearer key (``state.authorized``).
Tokenisation and chat templating run in a worker thread, so one huge body stalls no stream.

Knows: which route does what, in which order its refusals come. Does not know: admission rules
(``admission.py``), response shapes (``responses.py``), or the engine.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from speculab.serve.admission import check_model, check_token_ids, refuse_unsupported, submit, submit_all
from speculab.serve.errors import ApiError
from speculab.serve.protocol import ChatCompletionRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest
from speculab.serve.responses import CHAT, respond
from speculab.serve.several_prompts import respond_several
from speculab.serve.state import State, authorized

router = APIRouter()
v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorized)])
COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat defaults to the context's room


@router.get("/health")
async def health():
    return JSONResponse({})


@router.get("/metrics")
async def prometheus_metrics(state: State):
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/version")
async def version(state: State):
    info = state.info
    return {
        "version": info.version,
        "engine": "speculab",
        "method": info.method,
        "label": info.label,
        "dtype": info.dtype,
        "kv_dtype": info.kv_dtype or info.dtype,
        "sampling_verify": info.sampling_verify,
        "command": info.command,
    }


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, state: State):
    """vLLM's answer: the ids a completion or chat request with this text would start from, and the context."""
    check_model(state, body.model)
    tok = state.tokenizer
    if body.messages is not None:
        messages = [m.as_dict() for m in body.messages]
        try:
            text = await run_in_threadpool(tok.apply_chat_template, messages, body.add_generation_prompt)
        except Exception as err:  # noqa: BLE001  the model's own chat template refuses this conversation
            raise ApiError(400, f"the chat template refused these messages: {err}", "messages") from None
    else:
        text = body.prompt
    ids = await run_in_threadpool(tok.encode, text, body.special_tokens)
    strs = [tok.decode([i], skip_special_tokens=False) for i in ids] if body.return_token_strs else None
    return {"count": len(ids), "max_model_len": state.info.max_model_len, "tokens": ids, "token_strs": strs}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, state: State):
    check_model(state, body.model)
    if any(t >= state.vocab_size for t in body.tokens):
        raise ApiError(400, f"tokens must be in [0, {state.vocab_size})", "tokens")
    return {"prompt": await run_in_threadpool(state.tokenizer.decode, body.tokens, False)}


@v1.get("/models")
async def models(state: State):
    info = state.info
    model = {
        "id": info.model_name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "speculab",
        "root": info.model_path,
        "parent": None,
        "max_model_len": info.max_model_len,
        "speculab": {"method": info.method, "label": info.label, "dtype": info.dtype, "kv_dtype": info.kv_dtype or info.dtype},
    }
    return {"object": "list", "data": [model]}


@v1.post("/completions")
async def completions(body: CompletionRequest, request: Request, state: State):
    refuse_unsupported(body)
    prompts = [await run_in_threadpool(state.tokenizer.encode, p) if isinstance(p, str) else list(p) for p in body.prompts()]
    for prompt_ids in prompts:
        check_token_ids(state, prompt_ids)
    max_tokens = body.max_tokens if body.max_tokens is not None else COMPLETION_MAX_TOKENS
    handles = submit_all(state, body, prompts, max_tokens)
    if len(handles) == 1:
        return await respond(state, body, handles[0], request, "text_completion", "cmpl")
    return await respond_several(state, body, handles, request)


@v1.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request, state: State):
    refuse_unsupported(body)
    try:
        prompt_ids = await run_in_threadpool(state.tokenizer.encode_chat, [m.as_dict() for m in body.messages])
    except Exception as err:  # noqa: BLE001  the model's own chat template refuses this conversation
        raise ApiError(400, f"the chat template refused these messages: {err}", "messages") from None
    handle = submit(state, body, prompt_ids, body.requested_max_tokens)
    return await respond(state, body, handle, request, CHAT, "chatcmpl")
