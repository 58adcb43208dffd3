"""The FastAPI application of ``speculab serve``: OpenAI's routes over one engine.

Knows: how the application is put together: the engine worker started and stopped with it, the body cap
(``limits.py``, 413), OpenAI's error body (``{"error": {"message", "type", "param", "code"}}``) for every refusal,
pydantic's validation errors as one sentence naming the field, and the routes (``routes.py``) over one
``ServeState`` (``state.py``).

Does not know: what a route does, how the engine decodes (``worker.py`` runs it), or the request fields' ranges
(``protocol.py``).
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from speculab.serve.errors import ApiError, error_body
from speculab.serve.limits import DEFAULT_MAX_BODY_BYTES, BodySizeLimit
from speculab.serve.routes import router, v1
from speculab.serve.state import ServeState


def build_app(state: ServeState, engine_thread: bool = True, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> FastAPI:
    """``engine_thread=False``: the caller runs ``state.worker.run()`` itself (``speculab serve`` does, in the main thread)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.worker.start(own_thread=engine_thread)
        yield
        state.worker.stop()

    app = FastAPI(title="speculab serve", lifespan=lifespan)
    app.state.serve = state
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.include_router(router)
    app.include_router(v1)
    return app


async def api_error(request: Request, err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(err.status, err.message, err.param), status_code=err.status)


async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
    message, param = validation_message(err)
    return JSONResponse(error_body(400, message, param), status_code=400)


def validation_message(err: RequestValidationError) -> tuple[str, str | None]:
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
