"""The FastAPI application of ``speculab serve``: OpenAI's routes over one engine.

Knows: the routes a client of ``vllm serve`` uses (``/v1/completions``,
``/v1/chat/completions``, streaming as Server-Sent Events with
``stream_options.include_usage``, ``/v1/models``, ``/version``, ``/health``,
``/metrics``), OpenAI's error body (``{"error": {"message", "type", "param",
"code"}}``) for every refusal, the optional Bearer key on ``/v1``, and the
per-response speculation statistics (``metrics.speculative_decoding``,
vLLM's per-request names). A client that goes away mid-request, streaming or
not, frees its slot at the engine's next step. Tokenisation and chat templating
run in a worker thread, so one huge body stalls no stream; bodies are capped
(``limits.py``, 413).

Does not know: how the engine decodes (``worker.py`` runs it) or the request
fields' ranges (``protocol.py``).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from speculab.engine import sequence_length
from speculab.serve.errors import ApiError, error_body
from speculab.serve.limits import DEFAULT_MAX_BODY_BYTES, BodySizeLimit
from speculab.serve.metrics import ServerMetrics
from speculab.serve.protocol import ChatCompletionRequest, CompletionRequest, Unsupported
from speculab.serve.text import TextStream
from speculab.serve.worker import EngineWorker, Handle, Output, QueueFull
from speculab.speculative.stats import SpecStats


@dataclass(frozen=True)
class ServeInfo:
    """What the server says about itself (``/v1/models``, ``/version``)."""

    model_name: str
    model_path: str
    method: str  # the method's name (baseline, eagle, ...)
    label: str  # the method spec's label, every setting in it
    dtype: str
    max_model_len: int
    version: str
    command: str | None = None  # the server's command line, secrets redacted (speculab.redact)


def _validation_message(err: RequestValidationError) -> tuple[str, str | None]:
    """One readable sentence for pydantic's errors, naming the field (``messages.0.role: ...``)."""
    parts, param = [], None
    for e in err.errors():
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        if e.get("type") == "json_invalid":
            return f"malformed JSON body: {e.get('msg')}", None
        field = ".".join(loc[:2] if loc and loc[0] in ("prompt", "stop") else loc) or "body"
        param = param or field
        parts.append(f"{field}: {e.get('msg')}")
    return "; ".join(dict.fromkeys(parts)), param


def spec_metrics(stats: SpecStats) -> dict:
    """The per-response speculation figures, in vLLM's per-request names."""
    return {
        "speculative_decoding": {
            "num_drafts": stats.drafts,
            "num_draft_tokens": stats.drafted_depth,
            "num_draft_nodes": stats.draft_tokens,
            "num_accepted_draft_tokens": stats.accepted_tokens,
            "num_accepted_tokens_per_pos": stats.accepted_per_position,
            "num_verify_steps": stats.steps,
            "draft_acceptance_rate": stats.acceptance_rate,
            "mean_acceptance_length": stats.mean_acceptance_length,
        }
    }


def build_app(
    worker: EngineWorker,
    tokenizer,
    metrics: ServerMetrics,
    info: ServeInfo,
    api_key: str | None = None,
    engine_thread: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """``engine_thread=False``: the caller runs ``worker.run()`` itself (``speculab serve`` does, in the main thread)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start(own_thread=engine_thread)
        yield
        worker.stop()

    app = FastAPI(title="speculab serve", lifespan=lifespan)
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError):
        return JSONResponse(error_body(err.status, err.message, err.param), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError):
        message, param = _validation_message(err)
        return JSONResponse(error_body(400, message, param), status_code=400)

    async def authorized(request: Request) -> None:
        """The /v1 routes' key check (a dependency, not an HTTP middleware: those hide the client's disconnect)."""
        if api_key:
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'")

    v1 = [Depends(authorized)]

    @app.get("/health")
    async def health():
        return JSONResponse({})

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/version")
    async def version():
        return {
            "version": info.version,
            "engine": "speculab",
            "method": info.method,
            "label": info.label,
            "dtype": info.dtype,
            "command": info.command,
        }

    @app.get("/v1/models", dependencies=v1)
    async def models():
        return {
            "object": "list",
            "data": [
                {
                    "id": info.model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "speculab",
                    "root": info.model_path,
                    "parent": None,
                    "max_model_len": info.max_model_len,
                    "speculab": {"method": info.method, "label": info.label, "dtype": info.dtype},
                }
            ],
        }

    def _refuse_unsupported(body) -> None:
        try:
            body.refuse_unsupported()
        except Unsupported as err:
            raise ApiError(400, str(err), err.param) from None

    def _prepare(body, prompt_ids: list[int], default_max: int | None) -> Handle:
        if body.model != info.model_name:
            raise ApiError(404, f"The model `{body.model}` does not exist; this server serves `{info.model_name}`", "model")
        if not prompt_ids:
            raise ApiError(400, "the prompt is empty after tokenization", "prompt")
        room = info.max_model_len - sequence_length(len(prompt_ids), 0, worker.engine.proposer)
        if room < 1:
            raise ApiError(
                400,
                f"the prompt has {len(prompt_ids)} tokens; this server's context is {info.max_model_len} tokens "
                "(--max-model-len), with room left for at least one output token",
                "prompt",
            )
        max_tokens = default_max if default_max is not None else room
        vocab = worker.engine.model.config.vocab_size
        if any(t >= vocab for t in body.stop_token_ids or ()):
            raise ApiError(400, f"stop_token_ids must be in [0, {vocab})", "stop_token_ids")
        try:
            params = body.sampling(max_tokens, worker.engine.default_stop_ids)
            worker.engine.check_request(prompt_ids, params)
        except ValueError as err:
            param = next((f for f in ("max_tokens", "seed", "temperature", "top_p", "top_k") if f in str(err)), None)
            raise ApiError(400, f"{err} (the context is {info.max_model_len} tokens: prompt + max_tokens must fit)", param) from None
        try:
            return worker.submit(prompt_ids, params)
        except QueueFull as err:
            raise ApiError(429, str(err)) from None

    @app.post("/v1/completions", dependencies=v1)
    async def completions(body: CompletionRequest, request: Request):
        _refuse_unsupported(body)
        prompt = body.prompt
        prompt_ids = await run_in_threadpool(tokenizer.encode, prompt) if isinstance(prompt, str) else list(prompt)
        if prompt_ids and (min(prompt_ids) < 0 or max(prompt_ids) >= worker.engine.model.config.vocab_size):
            raise ApiError(400, f"prompt token ids must be in [0, {worker.engine.model.config.vocab_size})", "prompt")
        handle = _prepare(body, prompt_ids, body.max_tokens if body.max_tokens is not None else 16)
        return await _respond(body, handle, request, "text_completion", "cmpl")

    @app.post("/v1/chat/completions", dependencies=v1)
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        _refuse_unsupported(body)
        try:
            prompt_ids = await run_in_threadpool(tokenizer.encode_chat, [m.as_dict() for m in body.messages])
        except Exception as err:  # noqa: BLE001  the model's own chat template refuses this conversation
            raise ApiError(400, f"the chat template refused these messages: {err}", "messages") from None
        handle = _prepare(body, prompt_ids, body.requested_max_tokens)
        return await _respond(body, handle, request, "chat.completion", "chatcmpl")

    async def _respond(body, handle: Handle, request: Request, kind: str, prefix: str):
        text = TextStream(tokenizer, body.stop)
        rid, created = f"{prefix}-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            return EventSourceResponse(_stream(body, handle, text, kind, rid, created), ping=15)
        try:
            reason, pieces = await _collect(handle, text, request)
        finally:
            worker.abort(handle)  # a no-op once finished; frees the slot when the client left early
        return _full_response(body, handle, kind, rid, created, "".join(pieces), reason)

    async def _collect(handle: Handle, text: TextStream, request: Request) -> tuple[str, list[str]]:
        pieces: list[str] = []
        watcher = asyncio.create_task(_abort_on_disconnect(handle, request))
        try:
            while True:
                out: Output = await handle.outputs.get()
                reason = _consume(handle, out, text, pieces)
                if reason is not None:
                    return reason, pieces
        finally:
            watcher.cancel()

    async def _abort_on_disconnect(handle: Handle, request: Request) -> None:
        """Abort the request as soon as its client goes (the body is read, so the next ASGI message is the
        disconnect); the engine frees the slot at its next step and the last output ends ``_collect``."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        worker.abort(handle)

    def _consume(handle: Handle, out: Output, text: TextStream, pieces: list[str]) -> str | None:
        """Add one output's text to ``pieces``; returns the finish reason once the request is over."""
        if out.error is not None:
            raise ApiError(500, out.error)
        pieces.append(text.push(out.token_ids))
        if text.stopped:
            worker.abort(handle, reason="stop")
            return "stop"
        if out.finish_reason is not None:
            pieces.append(text.flush())
            return out.finish_reason
        return None

    def _usage(handle: Handle) -> dict:
        n_out = len(handle.request.output_ids) if handle.request else 0
        return {"prompt_tokens": len(handle.prompt_ids), "completion_tokens": n_out, "total_tokens": len(handle.prompt_ids) + n_out}

    def _choice(kind: str, text: str, reason: str | None, delta: bool) -> dict:
        if kind == "chat.completion":
            key = "delta" if delta else "message"
            content = {"content": text} if delta else {"role": "assistant", "content": text}
            return {"index": 0, key: content, "logprobs": None, "finish_reason": reason}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}

    def _full_response(body, handle, kind, rid, created, content, reason) -> dict:
        return {
            "id": rid,
            "object": kind,
            "created": created,
            "model": info.model_name,
            "choices": [_choice(kind, content, reason, delta=False)],
            "usage": _usage(handle),
            "metrics": spec_metrics(handle.stats),
        }

    async def _stream(body, handle: Handle, text: TextStream, kind: str, rid: str, created: int) -> AsyncIterator[dict]:
        chunk_kind = "chat.completion.chunk" if kind == "chat.completion" else "text_completion"

        def chunk(choices: list, **extra) -> dict:
            return {
                "data": _json({"id": rid, "object": chunk_kind, "created": created, "model": info.model_name, "choices": choices, **extra})
            }

        try:
            if kind == "chat.completion":
                yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
            while True:
                out = await handle.outputs.get()
                pieces: list[str] = []
                try:
                    reason = _consume(handle, out, text, pieces)
                except ApiError as err:
                    yield {"data": _json(error_body(err.status, err.message))}
                    break
                if "".join(pieces):
                    yield chunk([_choice(kind, "".join(pieces), None, delta=True)])
                if reason is not None:
                    yield chunk([_choice(kind, "", reason, delta=True)], metrics=spec_metrics(handle.stats))
                    if body.include_usage:
                        yield chunk([], usage=_usage(handle))
                    break
            yield {"data": "[DONE]"}
        finally:  # also when the client disconnects and the generator is cancelled
            worker.abort(handle)

    return app


def _json(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))
