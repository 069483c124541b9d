"""Mem0-shaped memory payloads."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from backend.api.schemas.text import Metadata, Text
from backend.db.models import Fact, FactEncoding, FactHistory

USER_ID = Field(min_length=1, max_length=200)


class Message(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: Text = Field(min_length=1, max_length=20_000)


class MemoryCreate(BaseModel):
    user_id: Text = USER_ID
    messages: list[Message] | None = Field(default=None, max_length=200)
    text: Text | None = Field(default=None, min_length=1, max_length=20_000)
    metadata: Metadata = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> MemoryCreate:
        if (self.messages is None) == (self.text is None):
            raise ValueError("give exactly one of 'messages' or 'text'")
        return self

    def texts(self) -> list[str]:
        if self.text is not None:
            return [self.text.strip()]
        # Each user/assistant message becomes one memory; system messages are instructions.
        return [m.content.strip() for m in self.messages or [] if m.role != "system"]


class MemoryUpdate(BaseModel):
    text: Text = Field(min_length=1, max_length=20_000)
    metadata: Metadata | None = None


class MemoryOut(BaseModel):
    id: uuid.UUID
    user_id: str
    memory: str
    version: int
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float | None = None

    @classmethod
    def of(cls, fact: Fact, user_id: str, score: float | None = None) -> MemoryOut:
        """``user_id``: the owner's external id (lists and searches are per user; a single
        memory's owner comes from ``MemoryService.owner_id``)."""
        return cls(id=fact.public_id, user_id=user_id, memory=fact.text, version=fact.version,
                   metadata=fact.meta or {}, created_at=fact.created_at,
                   updated_at=fact.updated_at, score=score)  # fmt: skip


class HistoryOut(BaseModel):
    memory_id: uuid.UUID
    version: int
    event: str
    old_memory: str | None
    new_memory: str | None
    created_at: datetime

    @classmethod
    def of(cls, memory_id: uuid.UUID, entry: FactHistory) -> HistoryOut:
        return cls(memory_id=memory_id, version=entry.version, event=entry.event,
                   old_memory=entry.old_text, new_memory=entry.new_text,
                   created_at=entry.created_at)  # fmt: skip


class EncodingOut(BaseModel):
    model: str
    window: int
    fact_version: int
    encoding_version: int
    status: str
    nbytes: int

    @classmethod
    def of(cls, row: FactEncoding) -> EncodingOut:
        return cls(model=row.model, window=row.window, fact_version=row.fact_version,
                   encoding_version=row.encoding_version, status=row.status,
                   nbytes=row.nbytes)  # fmt: skip


class SearchRequest(BaseModel):
    user_id: Text = USER_ID
    query: Text = Field(min_length=1, max_length=5_000)
    top_k: int = Field(5, ge=1, le=200)


class SearchOut(BaseModel):
    results: list[MemoryOut]


class MemoryCreated(BaseModel):
    results: list[MemoryOut]
    job_id: uuid.UUID | None


class Deleted(BaseModel):
    deleted: int
