"""Every error reaches clients as ``{"error": {"code", "message"}}``; mapped here only."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gpu_runtime.errors import (
    EngineError,
    InvalidRequestError,
    PromptTooLongError,
    RuntimeErrorBase,
    TenantMismatchError,
)


class NotReadyError(RuntimeErrorBase):
    """The engine is still starting."""


class NoEmbedderError(RuntimeErrorBase):
    """Query embeddings are not served by this runtime (``query_embedder`` off or on a CPU)."""


class UnauthorizedError(RuntimeErrorBase):
    """No or a wrong service token."""


def status_of(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, PromptTooLongError):
        return 400, "prompt_too_long"
    if isinstance(exc, InvalidRequestError | TenantMismatchError | ValueError):
        return 400, "invalid_request"
    if isinstance(exc, UnauthorizedError):
        return 401, "unauthorized"
    if isinstance(exc, NoEmbedderError):
        return 503, "no_embedder"
    if isinstance(exc, NotReadyError):
        return 503, "not_ready"
    if isinstance(exc, EngineError):
        return 503, "engine_dead"
    return 500, "internal_error"


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RuntimeErrorBase)
    async def _ours(_: Request, exc: RuntimeErrorBase) -> JSONResponse:
        status, code = status_of(exc)
        return JSONResponse(error_body(code, str(exc)), status_code=status)

    @app.exception_handler(ValueError)
    async def _value(_: Request, exc: ValueError) -> JSONResponse:
        status, code = status_of(exc)
        return JSONResponse(error_body(code, str(exc)), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: {e.get('msg')}"
            for e in exc.errors()
        )
        return JSONResponse(error_body("invalid_request", details), status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
