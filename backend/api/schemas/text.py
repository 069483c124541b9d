"""Validated building blocks of every request schema: text Postgres can store, ids in range,
JSON of bounded size.

Postgres refuses NUL in text and jsonb, and psycopg cannot encode an unpaired surrogate (JSON
allows ``"\\ud800"``); either would surface as a database error, so both are a 422 here, naming
the field. Ids and offsets are bigint columns: beyond 2**63 - 1 the driver fails, so they are
range-checked before any query.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import AfterValidator

MAX_BIGINT = 2**63 - 1
METADATA_MAX_BYTES = 16 * 1024  # serialized; a memory's metadata is labels, not documents
JSON_MAX_DEPTH = 16


def storable(value: str) -> str:
    """``value`` unchanged, or ``ValueError`` if Postgres could not store it as text."""
    if "\x00" in value:
        raise ValueError("must not contain NUL (\\u0000) characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no unpaired surrogates)") from None
    return value


def _walk(value: Any, depth: int = 0) -> None:
    if depth > JSON_MAX_DEPTH:
        raise ValueError(f"nested deeper than {JSON_MAX_DEPTH} levels")
    if isinstance(value, str):
        storable(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            storable(str(key))
            _walk(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _walk(item, depth + 1)


def storable_json(value: Any) -> Any:
    """Every key and string of a JSON document is storable text; nesting is bounded."""
    _walk(value)
    return value


def small_metadata(value: dict[str, Any]) -> dict[str, Any]:
    storable_json(value)
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > METADATA_MAX_BYTES:
        raise ValueError(f"is {size} bytes serialized; at most {METADATA_MAX_BYTES} are allowed")
    return value


Text = Annotated[str, AfterValidator(storable)]
JsonDoc = Annotated[dict[str, Any], AfterValidator(storable_json)]
Metadata = Annotated[dict[str, Any], AfterValidator(small_metadata)]

# Path and query parameters (FastAPI applies the same validators there).
MemoryIdPath = Annotated[uuid.UUID, Path(description="a memory's id")]
OffsetQuery = Annotated[int, Query(ge=0, le=MAX_BIGINT)]
UserIdQuery = Annotated[Text, Query(min_length=1, max_length=200)]
