"""OpenAI's error body for every refusal of ``speculab serve``: ``{"error": {"message", "type", "param", "code"}}``.

Knows: the status codes the server answers with and their OpenAI type names. Does not know: routes.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    413: "RequestTooLargeError",
    429: "RateLimitError",
    500: "InternalServerError",
}


def error_body(status: int, message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "BadRequestError"), "param": param, "code": status}}
