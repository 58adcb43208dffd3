"""The request body size limit of ``speculab serve``: a body over the limit is answered 413 before any route reads it.

Knows: ASGI (a pure middleware, so the route still sees the client's disconnect after the body), the declared
``Content-Length`` and the bytes actually sent (a chunked body declares none). The body is read here, up to the
limit, and replayed to the app. Does not know: the routes or the engine.
"""

from __future__ import annotations

import json

from speculab.serve.errors import error_body

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # far above any prompt that fits a 128k-token context's text


class BodySizeLimit:
    def __init__(self, app, max_bytes: int = DEFAULT_MAX_BODY_BYTES):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left while sending
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._refuse(send)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send) -> None:
        message = f"the request body is over this server's limit of {self.max_bytes} bytes (--max-body-bytes)"
        payload = json.dumps(error_body(413, message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
