"""Typed SQLAlchemy 2 models. Every tenant-owned table carries ``tenant_id``; the repositories
in ``backend.repositories`` are the only code that queries them, always scoped by tenant."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base

TENANT_FK = "tenants.id"


class EncodingStatus(enum.StrEnum):
    """A fact version's KV under one encoding config."""

    PENDING = "pending"  # a job will (re-)encode it
    READY = "ready"  # stored: chats inject it
    FAILED = "failed"


class JobStatus(enum.StrEnum):
    QUEUED = "queued"  # written; its task sent or waiting in the outbox
    RUNNING = "running"  # a worker holds it (and touches it: its heartbeat)
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class JobKind(enum.StrEnum):
    ENCODE_FACTS = "encode_facts"
    INGEST_CONVERSATION = "ingest_conversation"
    EXTRACT_MEMORIES = "extract_memories"


def _now_column() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now())


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = _now_column()
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Per-tenant limits (null: the settings' defaults; 0: none), enforced in Redis by the API.
    requests_per_minute: Mapped[int | None] = mapped_column()
    tokens_per_minute: Mapped[int | None] = mapped_column()
    max_concurrent_requests: Mapped[int | None] = mapped_column()
    # Its share of the engine when tenants contend (the runtime's fair gate; null: 1).
    fair_weight: Mapped[float | None] = mapped_column()


class ApiKey(Base):
    """Only an HMAC of the key is stored; ``prefix`` lets people tell keys apart."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey(TENANT_FK, ondelete="CASCADE"), index=True
    )
    scope: Mapped[str] = mapped_column(String(16))  # "tenant" | "admin"
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = _now_column()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class EndUser(Base):
    """A tenant's end user (Mem0's ``user_id``). ``memory_revision`` bumps on every fact change so
    every process can tell whether its retrieval index is current."""

    __tablename__ = "end_users"
    __table_args__ = (UniqueConstraint("tenant_id", "external_id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey(TENANT_FK, ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(200))
    memory_revision: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = _now_column()


class Conversation(Base):
    __tablename__ = "conversations"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey(TENANT_FK, ondelete="CASCADE"), index=True
    )
    user_id: Mapped[int] = mapped_column(ForeignKey("end_users.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(300), default="")
    source: Mapped[str] = mapped_column(String(32), default="api")  # "api" | "locomo"
    created_at: Mapped[datetime] = _now_column()


class Turn(Base):
    __tablename__ = "turns"
    __table_args__ = (UniqueConstraint("conversation_id", "seq"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey(TENANT_FK, ondelete="CASCADE"), index=True
    )
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    speaker: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    session: Mapped[str] = mapped_column(String(64), default="")
    ref: Mapped[str] = mapped_column(String(64), default="")  # the source's turn id (LoCoMo dia_id)
    spoken_at: Mapped[str] = mapped_column(String(64), default="")  # as given (LoCoMo strings)
    created_at: Mapped[datetime] = _now_column()


class Fact(Base):
    __tablename__ = "facts"
    __table_args__ = (
        Index("ix_facts_tenant_user_live", "tenant_id", "user_id", "deleted_at"),
        Index("ix_facts_tenant_agent_id", "tenant_id", "agent_id"),
        Index("ix_facts_tenant_app_id", "tenant_id", "app_id"),
        Index("ix_facts_tenant_run_id", "tenant_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    # What the API and jobs call the memory: random, so ids say nothing about other tenants'
    # memories (the sequential ``id`` stays internal: index entries, foreign keys).
    public_id: Mapped[uuid.UUID] = mapped_column(
        unique=True, default=uuid.uuid4, server_default=text("gen_random_uuid()")
    )
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey(TENANT_FK, ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("end_users.id", ondelete="CASCADE"))
    text: Mapped[str] = mapped_column(Text)
    source_turn_id: Mapped[int | None] = mapped_column(
        ForeignKey("turns.id", ondelete="SET NULL"), index=True
    )
    version: Mapped[int] = mapped_column(Integer, default=1)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, default=dict)
    # Mem0's scopes besides the user (None: not scoped to one). A memory without a user belongs
    # to the tenant's scope owner, the end user with external id "" (backend.services.mem0).
    agent_id: Mapped[str | None] = mapped_column(String(200))
    app_id: Mapped[str | None] = mapped_column(String(200))
    run_id: Mapped[str | None] = mapped_column(String(200))
    categories: Mapped[list[str]] = mapped_column(JSONB, default=list, server_default="[]")
    embedding: Mapped[bytes] = mapped_column(LargeBinary)  # float32 MiniLM vector, normalised
    created_at: Mapped[datetime] = _now_column()
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class FactHistory(Base):
    __tablename__ = "fact_history"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey(TENANT_FK, ondelete="CASCADE"), index=True
    )
    fact_id: Mapped[int] = mapped_column(ForeignKey("facts.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    event: Mapped[str] = mapped_column(String(16))  # ADD | UPDATE | DELETE
    old_text: Mapped[str | None] = mapped_column(Text)
    new_text: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now_column()


class FactEncoding(Base):
    """One fact version's KV under one encoding config; ``ready`` means the runtime holds it."""

    __tablename__ = "fact_encodings"
    __table_args__ = (
        UniqueConstraint("fact_id", "fact_version", "model", "window", "encoding_version"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey(TENANT_FK, ondelete="CASCADE"), index=True
    )
    fact_id: Mapped[int] = mapped_column(ForeignKey("facts.id", ondelete="CASCADE"))
    fact_version: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(200))
    window: Mapped[int] = mapped_column(Integer)
    encoding_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=EncodingStatus.PENDING)
    nbytes: Mapped[int] = mapped_column(BigInteger, default=0)
    tier: Mapped[str] = mapped_column(String(16), default="")
    error: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (  # the outbox relay's scan (backend.jobs.pipeline.outbox)
        Index("ix_jobs_undispatched", "created_at", postgresql_where=text("dispatched_at IS NULL")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey(TENANT_FK, ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(32))  # a JobKind
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    error: Mapped[str] = mapped_column(Text, default="")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # The outbox: when its task reached the broker (None: not yet; backend.services.outbox).
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now_column()
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class RequestLog(Base):
    __tablename__ = "request_log"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey(TENANT_FK, ondelete="CASCADE"), index=True
    )
    user_external_id: Mapped[str] = mapped_column(String(200), default="")
    k: Mapped[int] = mapped_column(Integer)
    mode: Mapped[str] = mapped_column(String(16))
    injected_tokens: Mapped[int] = mapped_column(Integer, default=0)
    ttft_ms: Mapped[float] = mapped_column(Float)
    total_ms: Mapped[float] = mapped_column(Float)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), index=True
    )


class IdempotencyRecord(Base):
    """A write's response, replayed when the same ``Idempotency-Key`` comes again."""

    __tablename__ = "idempotency_records"

    scope: Mapped[str] = mapped_column(String(64), primary_key=True)  # tenant id or "admin"
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    body: Mapped[Any] = mapped_column(JSONB)
    created_at: Mapped[datetime] = _now_column()
