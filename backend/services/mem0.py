"""Mem0's platform operations on a tenant's memories, through ``MemoryService`` (the same
writes, history, index, encoding jobs and purges as the native API).

A memory is scoped by a user and/or an agent, app or run. One given without a user belongs to
the tenant's scope owner (``SCOPE_OWNER``, an end user no Mem0 call can name), so every fact
still has an owner row, retrieval index and chat path as before. Filtered reads go through SQL
(Mem0's filter language, ``mem0_filters``); a filtered search scores the matching facts'
embeddings exactly (cosine, the same as the per-user index).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.db.models import Fact, Job, JobKind
from backend.errors import BadRequestError, NotFoundError
from backend.jobs.pipeline import outbox
from backend.jobs.pipeline.tasks import TaskName
from backend.repositories.jobs import JobRepository
from backend.repositories.memories import FactScope
from backend.repositories.scoped import SCOPE_OWNER, OwnedFact, ScopedFactRepository
from backend.retrieval.keyword import KeywordIndex, fuse
from backend.services.context import TenantContext
from backend.services.conversations import ConversationService
from backend.services.mem0_filters import ENTITY_FIELDS, compile_filter, mentions_entity
from backend.services.memories import MemoryService

SEARCH_CANDIDATES = 50_000  # facts one filtered search may score; beyond, narrow the filter
KEYWORD_POOL = 2_000  # of them, how many (best by cosine) the keyword ranking reorders
DELETE_BATCH = 500


@dataclass(frozen=True)
class Scope:
    """The entity ids a memory is written under (at least one)."""

    user_id: str | None = None
    agent_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None

    @property
    def owner(self) -> str:
        return self.user_id or SCOPE_OWNER

    def fact_scope(self, categories: tuple[str, ...] = ()) -> FactScope:
        return FactScope(self.agent_id, self.app_id, self.run_id, categories)

    def as_filter(self) -> dict[str, str]:
        return {k: v for k, v in self.as_dict().items() if v is not None}

    def as_dict(self) -> dict[str, str | None]:
        return {"user_id": self.user_id, "agent_id": self.agent_id, "app_id": self.app_id,
                "run_id": self.run_id}  # fmt: skip


def scope_of(top_level: dict[str, str | None], filters: dict[str, Any] | None) -> Scope:
    """The entity ids of an add: top-level fields, or plain values in ``filters`` (where the SDK
    puts them); at least one, and the two places must agree."""
    ids = {k: v for k, v in top_level.items() if v is not None}
    for key, value in (filters or {}).items():
        if key not in ENTITY_FIELDS or not isinstance(value, str) or not value or value == "*":
            raise BadRequestError(f"filters of an add take entity ids only, not {key!r}")
        if any(ord(c) < 32 for c in value):
            raise BadRequestError(f"{key}: control characters are not allowed")
        if len(value) > 200 or ids.setdefault(key, value) != value:
            raise BadRequestError(f"{key} is given twice, differently, or over 200 characters")
    if not ids:
        raise BadRequestError("give at least one of user_id, agent_id, app_id or run_id")
    return Scope(**ids)


def parse_memory_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise BadRequestError(f"{value[:64]!r} is not a memory id") from None


class Mem0Service:
    def __init__(self, ctx: TenantContext) -> None:
        self.ctx = ctx
        self.memories = MemoryService(ctx)
        self.scoped = ScopedFactRepository(ctx.session, ctx.tenant)

    # ---- writes --------------------------------------------------------------------------
    def add_verbatim(
        self, scope: Scope, texts: list[str], metadata: dict[str, Any] | None
    ) -> list[Fact]:
        """``infer=false``: each message stored as given (and encoded, as every memory)."""
        return self.memories.add(scope.owner, texts, metadata, scope=scope.fact_scope())

    def schedule_inference(self, scope: Scope, request: dict[str, Any]) -> Job:
        """``infer=true``: a job (through the outbox) extracts facts from the messages with the
        served model and reconciles them with the scope's memories (``backend.jobs.extraction``).
        ``request``: the messages, metadata and instructions, kept on the job until it ran."""
        self.memories.users.get_or_create(scope.owner)
        jobs = JobRepository(self.ctx.session, self.memories.encodings.tenant_uuid)
        job = jobs.create(
            JobKind.EXTRACT_MEMORIES, {"scope": scope.as_dict(), "request": request}, 1
        )
        kwargs: dict[str, object] = {"tenant_id": self.ctx.tenant.value, "job_id": str(job.id)}
        outbox.schedule(self.ctx.session, job, TaskName.EXTRACT_MEMORIES, kwargs, self.ctx.enqueue)
        return job

    def update(self, memory_id: uuid.UUID, text: str | None, meta: dict[str, Any] | None) -> Fact:
        fact = self.memories.get(memory_id)
        return self.memories.update(memory_id, text if text is not None else fact.text, meta)

    def delete_matching(self, filters: dict[str, Any]) -> int:
        condition = compile_filter(filters)
        deleted = 0
        while batch := self.scoped.matching(condition, DELETE_BATCH):
            for owned in batch:
                self.memories.delete_fact(owned.fact)
            deleted += len(batch)
        return deleted

    def delete_entity(self, entity_type: str, entity_id: str) -> int:
        """Everything of the entity: its memories (and their KV), its ``infer=true`` jobs not
        yet run (with the messages they hold), and for a user its conversations."""
        field = f"{entity_type}_id"
        JobRepository(self.ctx.session, self.memories.encodings.tenant_uuid).cancel_extractions(
            field, entity_id
        )
        if entity_type == "user" and (user := self.memories.users.get(entity_id)) is not None:
            conversations = ConversationService(self.ctx)
            for conversation_id in conversations.conversations.ids_of_user(user):
                conversations.delete(conversation_id)
        return self.delete_matching({field: entity_id})

    def batch_update(self, items: list[tuple[uuid.UUID, str | None, dict[str, Any] | None]]) -> int:
        """All or nothing: one memory not found and none is changed (the caller rolls back)."""
        for memory_id, text, meta in items:
            self.update(memory_id, text, meta)
        return len(items)

    def batch_delete(self, memory_ids: list[uuid.UUID]) -> int:
        for memory_id in memory_ids:
            self.memories.delete(memory_id)
        return len(memory_ids)

    # ---- reads ---------------------------------------------------------------------------
    def get(self, memory_id: uuid.UUID) -> OwnedFact:
        fact = self.memories.get(memory_id)
        user = self.memories.users.by_id(fact.user_id)
        return OwnedFact(fact, user.external_id if user else SCOPE_OWNER)

    def page(self, filters: dict[str, Any], page: int, size: int) -> tuple[list[OwnedFact], int]:
        return self.scoped.page(self._scoped_filter(filters), (page - 1) * size, size)

    def search(
        self, query: str, filters: dict[str, Any], top_k: int, threshold: float
    ) -> list[tuple[OwnedFact, float]]:
        condition = self._scoped_filter(filters)
        pending = self.ctx.queries.submit(self.ctx.tenant, query)  # while the rows load
        rows, texts, vectors = self.scoped.vectors(condition, SEARCH_CANDIDATES + 1)
        if len(rows) > SEARCH_CANDIDATES:
            raise BadRequestError(
                f"the filter matches over {SEARCH_CANDIDATES} memories; narrow it"
            )
        if not rows:
            return []
        keywords = self.ctx.index.keywords
        weight = keywords.weight if keywords is not None else 0.0
        scores = vectors @ pending.result()  # [candidates]: cosine, what the threshold is on
        dense = [int(i) for i in np.argsort(-scores, kind="stable")]
        # The keyword side ranks the dense ranking's head only: an index over 50,000 texts
        # would cost ~1 s a search (a user's few hundred facts fit whole).
        pool = dense[:KEYWORD_POOL]
        matched = (
            [pool[i] for i in KeywordIndex([texts[j] for j in pool]).ranking(query)]
            if weight > 0
            else []
        )
        order = [i for i in fuse(dense, matched, weight)
                 if scores[i] >= threshold][:top_k]  # fmt: skip
        found = self.scoped.by_rows([rows[i] for i in order])
        return [(owned, float(scores[i])) for owned, i in zip(found, order, strict=True)]

    def history(self, memory_id: uuid.UUID) -> tuple[Fact, str, list[Any]]:
        fact = self.memories.facts.get_any(memory_id)
        if fact is None:
            raise NotFoundError(f"memory {memory_id} not found")
        user = self.memories.users.by_id(fact.user_id)
        return fact, user.external_id if user else SCOPE_OWNER, self.memories.facts.history(fact)

    @staticmethod
    def _scoped_filter(filters: dict[str, Any]) -> Any:
        if not mentions_entity(filters):
            raise BadRequestError(
                "filters must name at least one entity: user_id, agent_id, app_id or run_id"
            )
        return compile_filter(filters)
