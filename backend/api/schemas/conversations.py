"""Conversation import: plain turns or a LoCoMo sample."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, Field, model_validator


class TurnIn(BaseModel):
    speaker: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=20_000)
    session: str = Field("", max_length=64)
    timestamp: str = Field("", max_length=64)


class ConversationImport(BaseModel):
    user_id: str = Field(min_length=1, max_length=200)
    title: str = Field("", max_length=300)
    turns: list[TurnIn] | None = Field(default=None, max_length=20_000)
    locomo: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ConversationImport:
        if (self.turns is None) == (self.locomo is None):
            raise ValueError("give exactly one of 'turns' or 'locomo'")
        return self


class ConversationOut(BaseModel):
    id: uuid.UUID
    title: str
    turns: int
    job_id: uuid.UUID | None = None
