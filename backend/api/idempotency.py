"""``Idempotency-Key`` on writes: the first response is stored with the write, in the same
transaction, and replayed for a retry with the same key and body."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from backend.api.deps import commit
from backend.errors import ConflictError
from backend.repositories.requests import IdempotencyRepository


def run_idempotent(
    session: Session,
    scope: str,
    key: str | None,
    request: Any,
    action: Callable[[], Any],
    status_code: int = 201,
) -> JSONResponse:
    if key is None:
        body = jsonable_encoder(action())
        commit(session)
        return JSONResponse(body, status_code=status_code)
    request_hash = hashlib.sha256(
        json.dumps(jsonable_encoder(request), sort_keys=True).encode()
    ).hexdigest()
    records = IdempotencyRepository(session, scope)
    previous = records.get(key)
    if previous is not None:
        if previous.request_hash != request_hash:
            raise ConflictError("this Idempotency-Key was used with a different request")
        return JSONResponse(previous.body, status_code=previous.status_code)
    body = jsonable_encoder(action())
    if not records.save(key, request_hash, status_code, body):
        raise ConflictError("a request with this Idempotency-Key is already in progress")
    commit(session)
    return JSONResponse(body, status_code=status_code)
