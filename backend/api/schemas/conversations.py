"""Conversation import: plain turns or a LoCoMo sample."""

from __future__ import annotations

import uuid

from pydantic import BaseModel, Field, model_validator

from backend.api.schemas.text import JsonDoc, Text
from backend.core.locomo import ConversationMemories


class TurnIn(BaseModel):
    speaker: Text = Field(min_length=1, max_length=200)
    text: Text = Field(min_length=1, max_length=20_000)
    session: Text = Field("", max_length=64)
    timestamp: Text = Field("", max_length=64)


class ConversationImport(BaseModel):
    user_id: Text = Field(min_length=1, max_length=200)
    title: Text = Field("", max_length=300)
    turns: list[TurnIn] | None = Field(default=None, max_length=20_000)
    locomo: JsonDoc | None = None
    memories: ConversationMemories = Field(
        ConversationMemories.OBSERVATIONS,
        description=(
            "What becomes the user's memories: 'observations' (a LoCoMo import's session "
            "observations when it has them, else each turn), 'turns' (each turn), or 'both' (the "
            "observations and the turns: better retrieval for 3.4 times the memories on LoCoMo)."
        ),
    )

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
