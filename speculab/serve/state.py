"""What every route of ``speculab serve`` reads: the server's parts and what it says about itself, as dependencies.

Knows: the one ``ServeState`` a server holds (its engine worker, tokenizer, metrics, ``ServeInfo`` and optional API
key), kept on ``app.state`` by ``app.py``, and the two dependencies routes declare: ``serve_state`` and the ``/v1``
key check ``authorized``, and ``State``, the annotation a route's parameter takes to receive it. Does not know: routes or responses.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from speculab.serve.errors import ApiError
from speculab.serve.metrics import ServerMetrics
from speculab.serve.worker import EngineWorker


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
    kv_dtype: str | None = None  # the KV cache's dtype (None: the model's)
    sampling_verify: str = "auto"  # a sampled request's default (``--sampling-verify``; sampling.SAMPLING_VERIFY)


@dataclass(frozen=True)
class ServeState:
    worker: EngineWorker
    tokenizer: object  # models/tokenizer.py's Tokenizer: encode, encode_chat, decode
    metrics: ServerMetrics
    info: ServeInfo
    api_key: str | None = None  # None: /v1 takes every request

    @property
    def vocab_size(self) -> int:
        return self.worker.engine.model.config.vocab_size


async def serve_state(request: Request) -> ServeState:
    return request.app.state.serve


State = Annotated[ServeState, Depends(serve_state)]  # a route's parameter that receives the server's state


async def authorized(request: Request, state: State) -> None:
    """The /v1 routes' key check (a dependency, not an HTTP middleware: those hide the client's disconnect).
    Both dependencies are coroutines: FastAPI would run a plain function in its thread pool on every request."""
    if state.api_key:
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {state.api_key}".encode()):
            raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'")
