"""Memories (facts) of one tenant's end users: write with history, index, encode, purge."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from backend.db.models import EndUser, Fact, FactEncoding, FactHistory, JobKind
from backend.db.session import release_connection
from backend.errors import NotFoundError
from backend.jobs.pipeline import outbox
from backend.jobs.pipeline.tasks import TaskName
from backend.repositories.base import Page
from backend.repositories.encodings import EncodingRepository
from backend.repositories.jobs import JobRepository
from backend.repositories.memories import (
    FactBrief,
    FactRepository,
    FactScope,
    UserRepository,
    vector_from,
)
from backend.repositories.requests import IdempotencyRepository
from backend.retrieval.index import IndexKey
from backend.retrieval.keyword import KeywordCache, fuse
from backend.services.context import TenantContext
from backend.services.timing import Splits
from gpu_runtime.types import EncodingConfig, FactKey, TenantId


@dataclass(frozen=True)
class SearchHit:
    fact: Fact
    score: float


@dataclass(frozen=True)
class BriefHit:
    fact: FactBrief
    score: float


def fact_key(tenant: TenantId, fact: Fact | FactBrief, config: EncodingConfig) -> FactKey:
    """The KV of the fact's current version under ``config`` (named by its public id)."""
    return FactKey.for_fact(tenant, str(fact.public_id), fact.version, config)


def recorded_key(tenant: TenantId, public_id: uuid.UUID, row: FactEncoding) -> FactKey:
    """The KV an encoding row records: its fact version under its own config."""
    config = EncodingConfig(row.model, row.window, row.encoding_version)
    return FactKey.for_fact(tenant, str(public_id), row.fact_version, config)


class MemoryService:
    def __init__(self, ctx: TenantContext, splits: Splits | None = None) -> None:
        self.ctx = ctx
        self.splits = splits or Splits()  # where a search's time went (a chat reports it)
        self.last_job_id: uuid.UUID | None = None
        self.users = UserRepository(ctx.session, ctx.tenant)
        self.facts = FactRepository(ctx.session, ctx.tenant)
        self.encodings = EncodingRepository(ctx.session, ctx.tenant)

    # ---- writes --------------------------------------------------------------------------
    def add(
        self,
        user_external_id: str,
        texts: list[str],
        meta: dict[str, Any] | None = None,
        source_turn_ids: list[int | None] | None = None,
        encode: bool = True,
        scope: FactScope | None = None,
    ) -> list[Fact]:
        user = self.users.get_or_create(user_external_id)
        vectors = self.ctx.embedder.embed(texts)
        turns = source_turn_ids or [None] * len(texts)
        facts = [
            self.facts.add(user, text, vectors[i], meta, turns[i], scope)
            for i, text in enumerate(texts)
        ]
        self._changed(user, upserts=facts)
        if encode:
            self.schedule_encoding(facts)
        return facts

    def update(self, memory_id: uuid.UUID, text: str, meta: dict[str, Any] | None) -> Fact:
        fact = self.get(memory_id)
        old_keys = self._all_keys(fact)
        if meta is not None:
            fact.meta = meta
        if text != fact.text:
            self.facts.update_text(fact, text, self.ctx.embedder.embed([text])[0])
            user = self._owner(fact)
            self._changed(user, upserts=[fact])
            self.ctx.engine.purge(self.ctx.tenant, old_keys)  # the old version is never served
            self.schedule_encoding([fact])
        return fact

    def delete(self, memory_id: uuid.UUID) -> None:
        fact = self.get(memory_id)
        self._delete(fact)

    def delete_fact(self, fact: Fact) -> None:
        """A live fact already read (a filtered delete): the same as ``delete``."""
        self._delete(fact)

    def delete_all(self, user_external_id: str) -> int:
        user = self.users.get(user_external_id)
        if user is None:
            return 0
        count = 0
        while True:
            facts, _ = self.facts.list_for_user(user, Page(0, 500))
            if not facts:
                return count
            for fact in facts:
                self._delete(fact)
                count += 1

    def _delete(self, fact: Fact) -> None:
        keys = self._all_keys(fact)
        self.facts.soft_delete(fact)
        IdempotencyRepository(self.ctx.session, self.ctx.tenant.value).forget_memory(
            str(fact.public_id)
        )
        self._changed(self._owner(fact), removals=[fact.id])
        # Purged before the request is acknowledged: the KV can no longer be claimed.
        self.ctx.engine.purge(self.ctx.tenant, keys)

    # ---- reads ---------------------------------------------------------------------------
    def get(self, memory_id: uuid.UUID) -> Fact:
        fact = self.facts.get(memory_id)
        if fact is None:
            raise NotFoundError(f"memory {memory_id} not found")
        return fact

    def list_for(self, user_external_id: str, page: Page) -> tuple[list[Fact], int]:
        user = self.users.get(user_external_id)
        return self.facts.list_for_user(user, page) if user is not None else ([], 0)

    def history(self, memory_id: uuid.UUID) -> list[FactHistory]:
        fact = self.facts.get_any(memory_id)
        if fact is None:
            raise NotFoundError(f"memory {memory_id} not found")
        return self.facts.history(fact)

    def search(self, user_external_id: str, query: str, top_k: int) -> list[SearchHit]:
        pending = self.ctx.queries.submit(self.ctx.tenant, query)
        return self.search_when_ready(user_external_id, pending.result, top_k, query)

    def _fused(
        self,
        user: EndUser,
        key: IndexKey,
        vector_of: Callable[[], npt.NDArray[np.float32]],
        query: str,
        top_k: int,
        keywords: KeywordCache,
    ) -> tuple[list[tuple[int, float]], Mapping[int, FactBrief]]:
        """(fact row id, cosine) best first by the fused ranking: every fact's cosine, the
        keyword ranking of the index at the same revision; and the user's live facts at that
        revision by row id (cached with the keyword index). The keyword side runs first, while
        the query is still being embedded."""
        with self.splits.timed("keyword"):
            facts, by_id, index = keywords.get(
                key, user.memory_revision, lambda: self.facts.live_briefs(user)
            )
            matched = [facts[i].id for i in index.ranking(query)]
        release_connection(self.ctx.session)  # the embedding's wait holds no connection
        vector = vector_of()
        with self.splits.timed("dense"):
            dense = self.ctx.index.search(key, vector, max(1, self.ctx.index.size(key)))
            cosine = dict(dense)
            matched = [fact_id for fact_id in matched if fact_id in cosine]
            order = fuse([fact_id for fact_id, _ in dense], matched, keywords.weight)
        return [(fact_id, cosine[fact_id]) for fact_id in order[:top_k]], by_id

    def _ranked(
        self,
        user: EndUser,
        vector_of: Callable[[], npt.NDArray[np.float32]],
        top_k: int,
        query: str | None,
    ) -> tuple[list[tuple[int, float]], Mapping[int, FactBrief] | None]:
        """The user's top-k (fact row id, cosine), best first, and their live facts where the
        keyword cache holds them (None: dense only, nothing cached)."""
        with self.splits.timed("index"):
            key = self._ensure_index(user)
        keywords = self.ctx.index.keywords
        if query is None or keywords is None or keywords.weight <= 0:
            release_connection(self.ctx.session)  # the embedding's wait holds no connection
            vector = vector_of()
            with self.splits.timed("dense"):
                return self.ctx.index.search(key, vector, top_k), None
        return self._fused(user, key, vector_of, query, top_k, keywords)

    def search_vector(
        self, user_external_id: str, vector: npt.NDArray[np.float32], top_k: int
    ) -> list[SearchHit]:
        """The user's top-k live facts for an already embedded query (best first)."""
        return self.search_when_ready(user_external_id, lambda: vector, top_k)

    def search_when_ready(
        self,
        user_external_id: str,
        vector_of: Callable[[], npt.NDArray[np.float32]],
        top_k: int,
        query: str | None = None,
    ) -> list[SearchHit]:
        """``search_vector`` with the query's vector asked for only once the user's index is
        ready: its embedding (on the runtime, or in another thread) overlaps the lookups. With
        the ``query``'s text the dense ranking is fused with the keyword one (``keyword.py``)."""
        hits = self._hits(user_external_id, vector_of, top_k, query)
        return [SearchHit(fact, score) for fact, score in hits]

    def briefs_when_ready(
        self,
        user_external_id: str,
        vector_of: Callable[[], npt.NDArray[np.float32]],
        top_k: int,
        query: str | None = None,
    ) -> list[BriefHit]:
        """``search_when_ready`` for a chat: the hits as ``FactBrief`` s (name and text), from
        the keyword cache's facts at the user's revision where it has them (no query)."""
        with self.splits.timed("user"):
            user = self.users.get(user_external_id)
        if user is None:
            return []
        ranked, cached = self._ranked(user, vector_of, top_k, query)
        with self.splits.timed("rows"):
            if cached is None:
                cached = {row.id: row for row in self.facts.briefs_by_row([i for i, _ in ranked])}
            return [
                BriefHit(cached[i], score)
                for i, score in ranked
                if i in cached and cached[i].user_id == user.id
            ]

    def _hits(
        self,
        user_external_id: str,
        vector_of: Callable[[], npt.NDArray[np.float32]],
        top_k: int,
        query: str | None,
    ) -> list[tuple[Fact, float]]:
        """The user's hits, best first, as entities (Mem0's search returns their metadata)."""
        user = self.users.get(user_external_id)
        if user is None:
            return []
        ranked, _ = self._ranked(user, vector_of, top_k, query)
        rows = {row.id: row for row in self.facts.many_by_row([i for i, _ in ranked])}
        # Only live facts of this tenant and user come back, whatever the index holds.
        return [(rows[i], score) for i, score in ranked if i in rows and rows[i].user_id == user.id]

    # ---- encoding ------------------------------------------------------------------------
    def schedule_encoding(self, facts: list[Fact]) -> None:
        """A job for the worker, sent through the outbox once this transaction commits. The
        worker records the encodings (the model they are for is the runtime's, known when the
        job runs)."""
        if not facts:
            return
        job = JobRepository(self.ctx.session, self.encodings.tenant_uuid).create(
            JobKind.ENCODE_FACTS, {"fact_ids": [str(f.public_id) for f in facts]}, len(facts)
        )
        self.last_job_id = job.id
        payload: dict[str, object] = {
            "tenant_id": self.ctx.tenant.value,
            "fact_ids": [str(f.public_id) for f in facts],
            "job_id": str(job.id),
        }
        outbox.schedule(self.ctx.session, job, TaskName.ENCODE_FACTS, payload, self.ctx.enqueue)

    # ---- helpers -------------------------------------------------------------------------
    def owner_id(self, fact: Fact) -> str:
        """The external id of the memory's owner ("" if the owner is gone)."""
        user = self.users.by_id(fact.user_id)
        return user.external_id if user else ""

    def encodings_of(self, memory_id: uuid.UUID) -> list[FactEncoding]:
        return self.encodings.for_fact(self.get(memory_id).id)

    def _owner(self, fact: Fact) -> EndUser:
        user = self.users.by_id(fact.user_id)
        assert user is not None
        return user

    def _all_keys(self, fact: Fact) -> list[FactKey]:
        """Every key the fact may have KV under: each recorded encoding, and the current version
        under the current config (a job may be storing it right now)."""
        current = fact_key(self.ctx.tenant, fact, self.ctx.engine.encoding_config())
        recorded = [
            recorded_key(self.ctx.tenant, fact.public_id, row)
            for row in self.encodings.for_fact(fact.id)
        ]
        return list(dict.fromkeys([*recorded, current]))

    def _ensure_index(self, user: EndUser) -> IndexKey:
        key = IndexKey(self.ctx.tenant, user.external_id)
        if self.ctx.index.revision(key) != user.memory_revision:
            ids, vectors = self.facts.live_vectors(user)
            if not ids:
                vectors = vectors.reshape(0, self.ctx.index.dim)
            self.ctx.index.rebuild(key, ids, vectors, user.memory_revision)
        return key

    def _changed(
        self, user: EndUser, upserts: list[Fact] | None = None, removals: list[int] | None = None
    ) -> None:
        """Keep this process's index current; others notice the revision and rebuild."""
        key = IndexKey(self.ctx.tenant, user.external_id)
        before = user.memory_revision
        revision = self.users.bump_revision(user)
        if self.ctx.index.keywords is not None:  # stale now: its texts may hold a deleted fact
            self.ctx.index.keywords.drop_user(key)
        # Kept incrementally only if the index held was current (else, or if it was evicted
        # meanwhile, it is rebuilt from Postgres on the next search).
        self.ctx.index.apply_if_current(
            key,
            before,
            revision,
            [(fact.id, vector_from(fact.embedding).copy()) for fact in upserts or []],
            removals or [],
        )
