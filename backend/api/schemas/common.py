"""Shared response shapes."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


class PageOut(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    """Every error response: ``{"error": {"code", "message"}}`` (backend.api.errors)."""

    error: ErrorDetail


_MEANING = {
    400: "The request cannot be served as asked (e.g. the prompt exceeds the context)",
    401: "No API key, or an invalid or revoked one",
    403: "The key's scope may not use this endpoint",
    404: "Not found for this caller",
    409: "Idempotency-Key reused with a different request, or still in progress",
    413: "The request body is too large",
    422: "The request is invalid; the message names the field",
    503: "The database or the runtime is unavailable; retry",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error statuses a route can return."""
    return {c: {"model": ErrorOut, "description": _MEANING[c]} for c in codes}


# What every authenticated route can answer besides its own success and errors.
AUTHED = (401, 403, 413, 422, 503)
