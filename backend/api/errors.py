"""Every error reaches clients as ``{"error": {"code", "message"}}``, mapped here only."""

from __future__ import annotations

import logging

import psycopg.errors
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from backend.errors import AppError

logger = logging.getLogger(__name__)


def error_body(code: str, message: str, param: str | None = None) -> dict[str, dict[str, str]]:
    body = {"code": code, "message": message}
    if param is not None:
        body["param"] = param
    return {"error": body}


def validation_message(exc: RequestValidationError) -> str:
    """Each refused field and why, the field named first."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: {e.get('msg')}"
        for e in exc.errors()
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(_: Request, exc: AppError) -> JSONResponse:
        body = error_body(exc.code, exc.message, exc.param)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body("invalid_request", validation_message(exc)), 422)

    @app.exception_handler(sqlalchemy.exc.TimeoutError)
    @app.exception_handler(sqlalchemy.exc.OperationalError)
    async def _database(_: Request, exc: Exception) -> JSONResponse:
        # No connection to Postgres (down, or none free in time): try again, not a 500. The
        # cause goes to the log: "saturated" has two (the pool's wait, the server's limit).
        logger.warning("database unavailable (%s): %s", type(exc).__name__, str(exc)[:300])
        message = "the database is unavailable or saturated; retry shortly"
        return JSONResponse(error_body("database_unavailable", message), status_code=503)

    @app.exception_handler(sqlalchemy.exc.ProgrammingError)
    async def _schema(_: Request, exc: sqlalchemy.exc.ProgrammingError) -> JSONResponse:
        # A table or column this code needs is missing: the schema is behind (not migrated
        # yet, or a deploy skipped it). Not the client's fault, and not a bug to hide in a 500.
        if not isinstance(exc.orig, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
            raise exc  # any other: a bug, answered as a 500 by UnhandledErrors
        logger.error("database schema behind this version: %s", str(exc.orig)[:300])
        message = "the database schema is not at this version's; the operator must run migrations"
        return JSONResponse(error_body("database_schema_outdated", message), status_code=503)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI's "error parsing the body": not UTF-8 / not JSON
            message = f"the request body could not be read as JSON: {exc.detail}"
            return JSONResponse(error_body("invalid_request", message), status_code=422)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
