"""Mem0's platform API payloads, as the official ``mem0ai`` SDK sends and reads them. Every
string is validated like the rest of the API (``backend.api.schemas.text``); fields Mem0 has and
we do not honour are refused when set (never silently dropped), unknown ones ignored."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.api.schemas.text import JsonDoc, Metadata, Text
from backend.db.models import Fact, FactHistory, Job, JobStatus
from backend.repositories.scoped import SCOPE_OWNER, OwnedFact

EntityType = Literal["user", "agent", "app", "run"]
ENTITY_TYPES: tuple[EntityType, ...] = ("user", "agent", "app", "run")
EntityId = Annotated[Text, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]
MemoryText = Annotated[Text, Field(min_length=1, max_length=20_000)]
Instructions = Annotated[Text, Field(max_length=4_000)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # Mem0's other fields (org_id, version, ...)


class Mem0Message(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: Annotated[Text, Field(max_length=20_000)]
    name: Annotated[Text, Field(max_length=200)] | None = None


class Entities(_Body):
    user_id: EntityId | None = None
    agent_id: EntityId | None = None
    app_id: EntityId | None = None
    run_id: EntityId | None = None


class AddRequest(Entities):
    messages: list[Mem0Message] = Field(min_length=1, max_length=200)
    filters: JsonDoc | None = None  # the SDK's place for entity ids; top level works too
    metadata: Metadata | None = None
    infer: bool = True
    custom_instructions: Instructions | None = None
    agent_custom_instructions: Instructions | None = None
    includes: Instructions | None = None
    excludes: Instructions | None = None
    custom_categories: Annotated[list[dict[str, EntityId]], Field(max_length=100)] | None = None
    # Mem0 options with no counterpart here: refused when set.
    timestamp: int | None = None
    expiration_date: Text | None = None
    immutable: bool = False
    enable_graph: bool = False
    structured_data_schema: JsonDoc | None = None

    @model_validator(mode="after")
    def _supported(self) -> AddRequest:
        unsupported = [name for name in ("timestamp", "expiration_date", "structured_data_schema")
                       if getattr(self, name) is not None]  # fmt: skip
        unsupported += [name for name in ("immutable", "enable_graph") if getattr(self, name)]
        if unsupported:
            raise ValueError(f"not supported by this server: {', '.join(unsupported)}")
        return self


class ListRequest(_Body):
    filters: JsonDoc
    page: int | None = Field(default=None, ge=1, le=1_000_000)
    page_size: int | None = Field(default=None, ge=1, le=1000)


class SearchRequest(_Body):
    query: Annotated[Text, Field(min_length=1, max_length=5_000)]
    filters: JsonDoc
    top_k: int = Field(default=10, ge=1, le=1000)
    threshold: float = Field(default=0.1, ge=0.0, le=1.0)
    rerank: bool = False  # accepted: ranking is exact cosine similarity already


class UpdateRequest(_Body):
    text: MemoryText | None = None
    metadata: Metadata | None = None
    expiration_date: None = None  # only clearing it (null) is possible: none is ever set


class BatchUpdateItem(_Body):
    memory_id: Annotated[Text, Field(max_length=64)]
    text: MemoryText | None = None
    metadata: Metadata | None = None


class BatchUpdateRequest(BaseModel):
    memories: list[BatchUpdateItem] = Field(min_length=1, max_length=1000)


class BatchDeleteItem(_Body):
    memory_id: Annotated[Text, Field(max_length=64)]


class BatchDeleteRequest(BaseModel):
    memories: list[BatchDeleteItem] = Field(min_length=1, max_length=1000)


# ---- responses ---------------------------------------------------------------------------
EventStatus = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]
EVENT_STATUS: dict[str, EventStatus] = {
    JobStatus.QUEUED: "PENDING",
    JobStatus.RUNNING: "RUNNING",
    JobStatus.SUCCEEDED: "SUCCEEDED",
    JobStatus.FAILED: "FAILED",
}


def _entity(value: str | None) -> str | None:
    """An entity id as Mem0 shows it: the reserved scope owner is no user to the caller."""
    return value if value and value != SCOPE_OWNER else None


class Mem0Memory(BaseModel):
    id: str
    memory: str
    user_id: str | None
    agent_id: str | None
    app_id: str | None
    run_id: str | None
    session_id: str | None  # Mem0's name for run_id on some routes: both are sent
    metadata: dict[str, Any]
    categories: list[str]
    created_at: datetime
    updated_at: datetime
    expiration_date: str | None = None

    @classmethod
    def of(cls, owned: OwnedFact) -> Mem0Memory:
        fact = owned.fact
        return cls(
            id=str(fact.public_id), memory=fact.text, user_id=_entity(owned.user_id),
            agent_id=fact.agent_id, app_id=fact.app_id, run_id=fact.run_id,
            session_id=fact.run_id, metadata=fact.meta or {},
            categories=list(fact.categories or []), created_at=fact.created_at,
            updated_at=fact.updated_at,
        )  # fmt: skip


class Mem0Hit(Mem0Memory):
    score: float

    @classmethod
    def scored(cls, owned: OwnedFact, score: float) -> Mem0Hit:
        return cls(**Mem0Memory.of(owned).model_dump(), score=score)


class AddedMemory(BaseModel):
    id: str
    event: str
    data: dict[str, str]


class AddOut(BaseModel):
    results: list[AddedMemory]
    event_id: str | None
    status: Literal["PENDING", "SUCCEEDED"]
    message: str


class MemoryPage(BaseModel):
    count: int
    next: str | None
    previous: str | None
    results: list[Mem0Memory]


class SearchOut(BaseModel):
    results: list[Mem0Hit]


class Message(BaseModel):
    message: str


class HistoryEntry(BaseModel):
    id: str
    memory_id: str
    input: list[dict[str, str]]
    old_memory: str | None
    new_memory: str | None
    user_id: str | None
    agent_id: str | None
    app_id: str | None
    session_id: str | None
    categories: list[str]
    event: str
    metadata: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, fact: Fact, owner: str, entry: FactHistory) -> HistoryEntry:
        return cls(
            id=str(uuid.uuid5(fact.public_id, str(entry.id))), memory_id=str(fact.public_id),
            input=[], old_memory=entry.old_text, new_memory=entry.new_text,
            user_id=_entity(owner), agent_id=fact.agent_id, app_id=fact.app_id,
            session_id=fact.run_id, categories=list(fact.categories or []), event=entry.event,
            metadata=None, created_at=entry.created_at, updated_at=entry.created_at,
        )  # fmt: skip


class EntityOut(BaseModel):
    id: str
    name: str
    type: EntityType
    owner: str
    metadata: dict[str, Any] | None
    total_memories: int
    created_at: datetime
    updated_at: datetime


class EntityPage(BaseModel):
    count: int
    next: str | None
    previous: str | None
    results: list[EntityOut]
    total_users: int
    total_agents: int
    total_apps: int
    total_runs: int


class Ping(BaseModel):
    status: str
    message: str
    org_id: str
    project_id: str
    user_email: str | None


class EventOut(BaseModel):
    id: str
    event_type: str
    status: EventStatus
    results: list[dict[str, Any]]
    error: str | None
    message: str | None = None  # e.g. that the model extracted nothing
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, job: Job) -> EventOut:
        """An ``infer=true`` job as Mem0's event (``ADD``), with its decisions once applied."""
        return cls(
            id=str(job.id), event_type="ADD", status=EVENT_STATUS.get(job.status, "PENDING"),
            results=list((job.payload or {}).get("results", [])), error=job.error or None,
            message=(job.payload or {}).get("message"),
            created_at=job.created_at, updated_at=job.updated_at,
        )  # fmt: skip
