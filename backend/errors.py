"""The backend's error hierarchy; ``backend.api.errors`` maps it to HTTP in one place."""

from __future__ import annotations


class AppError(Exception):
    """Base class: every error the backend raises on purpose, with its HTTP status and code."""

    status_code = 500
    code = "internal_error"
    param: str | None = None  # the request field at fault, where OpenAI's clients read it
    headers: dict[str, str] | None = None  # response headers it needs (a 429's Retry-After)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(AppError):
    status_code, code = 400, "bad_request"


class ContextLengthError(BadRequestError):
    code = "context_length_exceeded"  # OpenAI's code for the same refusal


class NotFoundError(AppError):
    status_code, code = 404, "not_found"


class ModelNotFoundError(NotFoundError):
    code, param = "model_not_found", "model"  # OpenAI's code and param for the same refusal


class UnauthorizedError(AppError):
    status_code, code = 401, "unauthorized"


class ForbiddenError(AppError):
    status_code, code = 403, "forbidden"


class ConflictError(AppError):
    status_code, code = 409, "conflict"


class InvalidRequestError(AppError):
    status_code, code = 422, "invalid_request"


class UnavailableError(AppError):
    status_code, code = 503, "unavailable"


class RateLimitedError(AppError):
    """Over one of the tenant's limits: OpenAI's 429 with its ``x-ratelimit-*`` headers and
    ``Retry-After``, which the official SDKs read to retry by themselves."""

    status_code, code = 429, "rate_limit_exceeded"

    def __init__(self, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.headers = headers
