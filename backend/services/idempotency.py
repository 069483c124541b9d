"""Stored responses of idempotent writes (``Idempotency-Key``): the first response is kept with
the write, in its transaction, and replayed for a retry with the same key and request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from backend.errors import ConflictError
from backend.repositories.requests import IdempotencyRepository


@dataclass(frozen=True)
class StoredResponse:
    status_code: int
    body: Any


class IdempotencyService:
    def __init__(self, session: Session, scope: str) -> None:
        self.records = IdempotencyRepository(session, scope)

    def replay(self, key: str, request_hash: str) -> StoredResponse | None:
        """The response stored for ``key``, if any; a different request under it is a 409."""
        previous = self.records.get(key)
        if previous is None:
            return None
        if previous.request_hash != request_hash:
            raise ConflictError("this Idempotency-Key was used with a different request")
        return StoredResponse(previous.status_code, previous.body)

    def remember(self, key: str, request_hash: str, response: StoredResponse) -> None:
        """Stores the response with this transaction's write; a concurrent request that stored
        the key first wins (409 here: retry, and its response is replayed)."""
        if not self.records.save(key, request_hash, response.status_code, response.body):
            raise ConflictError("a request with this Idempotency-Key is already in progress")
