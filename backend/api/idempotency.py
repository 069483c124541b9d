"""``Idempotency-Key`` on writes, over HTTP: the request's hash, the action run once, its response
stored with the write (``services.idempotency``) and replayed for a retry."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from backend.api.deps import commit
from backend.services.idempotency import IdempotencyService, StoredResponse


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
    stored = IdempotencyService(session, scope)
    previous = stored.replay(key, request_hash)
    if previous is not None:
        return JSONResponse(previous.body, status_code=previous.status_code)
    response = StoredResponse(status_code, jsonable_encoder(action()))
    stored.remember(key, request_hash, response)
    commit(session)
    return JSONResponse(response.body, status_code=response.status_code)
