"""End users, facts and fact history of one tenant."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Select, func, select, update
from sqlalchemy.orm import defer

from backend.db.models import EndUser, Fact, FactHistory, Turn
from backend.repositories.base import Page, TenantScoped


@dataclass(frozen=True)
class FactBrief:
    """What a chat needs of a retrieved fact: its KV's name and its text. A plain row, since
    ORM entities cost a chat more than the query (``python -m bench.serve.db_reads``)."""

    id: int
    public_id: uuid.UUID
    user_id: int
    text: str
    version: int


class UserRepository(TenantScoped):
    def get(self, external_id: str) -> EndUser | None:
        return self.session.scalar(
            select(EndUser).where(
                EndUser.tenant_id == self.tenant_uuid, EndUser.external_id == external_id
            )
        )

    def get_or_create(self, external_id: str) -> EndUser:
        user = self.get(external_id)
        if user is None:
            user = EndUser(tenant_id=self.tenant_uuid, external_id=external_id, memory_revision=0)
            self.session.add(user)
            self.session.flush()
        return user

    def with_fact_counts(self, limit: int = 1000) -> list[tuple[str, int]]:
        """(external id, live facts) of the tenant's users, most facts first."""
        live = func.count(Fact.id).filter(Fact.deleted_at.is_(None))
        rows = self.session.execute(
            select(EndUser.external_id, live)
            .outerjoin(Fact, Fact.user_id == EndUser.id)
            .where(EndUser.tenant_id == self.tenant_uuid)
            .group_by(EndUser.external_id)
            .order_by(live.desc(), EndUser.external_id)
            .limit(limit)
        ).all()
        return [(str(r[0]), int(r[1])) for r in rows]

    def by_id(self, user_id: int) -> EndUser | None:
        return self.session.scalar(
            select(EndUser).where(EndUser.tenant_id == self.tenant_uuid, EndUser.id == user_id)
        )

    def bump_revision(self, user: EndUser) -> int:
        """Atomic in SQL, so two writers never hand out the same revision."""
        revision = self.session.scalar(
            update(EndUser)
            .where(EndUser.tenant_id == self.tenant_uuid, EndUser.id == user.id)
            .values(memory_revision=EndUser.memory_revision + 1)
            .returning(EndUser.memory_revision)
        )
        assert revision is not None
        self.session.refresh(user)
        return int(revision)


def vector_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def vector_from(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


@dataclass(frozen=True)
class FactScope:
    """Mem0's scopes of a memory besides its user, and its categories."""

    agent_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None
    categories: tuple[str, ...] = ()


class FactRepository(TenantScoped):
    def _live(self) -> Select[Any]:
        return select(Fact).where(Fact.tenant_id == self.tenant_uuid, Fact.deleted_at.is_(None))

    def add(
        self,
        user: EndUser,
        text: str,
        embedding: np.ndarray,
        meta: dict[str, Any] | None = None,
        source_turn_id: int | None = None,
        scope: FactScope | None = None,
    ) -> Fact:
        scope = scope or FactScope()
        fact = Fact(
            tenant_id=self.tenant_uuid,
            user_id=user.id,
            text=text,
            embedding=vector_bytes(embedding),
            meta=meta or {},
            source_turn_id=source_turn_id,
            version=1,
            agent_id=scope.agent_id,
            app_id=scope.app_id,
            run_id=scope.run_id,
            categories=list(scope.categories),
        )
        self.session.add(fact)
        self.session.flush()
        self._history(fact, "ADD", None, text)
        return fact

    def get(self, public_id: uuid.UUID) -> Fact | None:
        fact: Fact | None = self.session.scalar(self._live().where(Fact.public_id == public_id))
        return fact

    def get_any(self, public_id: uuid.UUID) -> Fact | None:
        """Including deleted facts (history stays readable)."""
        return self.session.scalar(
            select(Fact).where(Fact.tenant_id == self.tenant_uuid, Fact.public_id == public_id)
        )

    def many(self, public_ids: Sequence[uuid.UUID]) -> list[Fact]:
        """The live ones of these facts, in the order asked."""
        if not public_ids:
            return []
        query = self._live().where(Fact.public_id.in_(public_ids))
        rows = {f.public_id: f for f in self.session.scalars(query)}
        return [rows[i] for i in public_ids if i in rows]

    def many_by_row(self, row_ids: Sequence[int]) -> list[Fact]:
        """By internal row id (what the retrieval index holds), in the order asked."""
        if not row_ids:
            return []
        # The vectors stay behind (1.5 KB a row; loaded only if asked for): search hits need text.
        live = self._live().where(Fact.id.in_(row_ids)).options(defer(Fact.embedding))
        rows = {f.id: f for f in self.session.scalars(live)}
        return [rows[i] for i in row_ids if i in rows]

    def briefs_by_row(self, row_ids: Sequence[int]) -> list[FactBrief]:
        """``many_by_row``'s facts as ``FactBrief`` s, in the order asked."""
        if not row_ids:
            return []
        live = select(Fact.id, Fact.public_id, Fact.user_id, Fact.text, Fact.version).where(
            Fact.tenant_id == self.tenant_uuid, Fact.deleted_at.is_(None), Fact.id.in_(row_ids)
        )
        rows = {r.id: FactBrief(*r) for r in self.session.execute(live)}
        return [rows[i] for i in row_ids if i in rows]

    def list_for_user(self, user: EndUser, page: Page) -> tuple[list[Fact], int]:
        query = self._live().where(Fact.user_id == user.id)
        total = self.session.scalar(select(func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(query.order_by(Fact.id).offset(page.offset).limit(page.limit))
        return list(rows), total

    def live_from_conversation(self, conversation_id: uuid.UUID) -> list[Fact]:
        """Live facts taken from the conversation's turns."""
        return list(
            self.session.scalars(
                self._live()
                .join(Turn, Turn.id == Fact.source_turn_id)
                .where(Turn.conversation_id == conversation_id)
                .order_by(Fact.id)
            )
        )

    def source_turns(self, conversation_id: uuid.UUID) -> set[int]:
        """Turns of a conversation that already have facts (live or deleted)."""
        rows = self.session.scalars(
            select(Fact.source_turn_id)
            .join(Turn, Turn.id == Fact.source_turn_id)
            .where(Fact.tenant_id == self.tenant_uuid, Turn.conversation_id == conversation_id)
        )
        return {int(r) for r in rows if r is not None}

    def _live_of(self, user: EndUser, *columns: Any) -> Sequence[Any]:
        """Those columns of the user's live facts."""
        return self.session.execute(
            select(*columns).where(
                Fact.tenant_id == self.tenant_uuid,
                Fact.user_id == user.id,
                Fact.deleted_at.is_(None),
            )
        ).all()

    def live_vectors(self, user: EndUser) -> tuple[list[int], np.ndarray]:
        rows = self._live_of(user, Fact.id, Fact.embedding)
        ids = [int(r[0]) for r in rows]
        vectors = np.stack([vector_from(r[1]) for r in rows]) if rows else np.zeros((0, 0))
        return ids, vectors.astype(np.float32)

    def live_briefs(self, user: EndUser) -> list[FactBrief]:
        """The user's live facts as ``FactBrief`` s (their keyword index's corpus)."""
        columns = (Fact.id, Fact.public_id, Fact.user_id, Fact.text, Fact.version)
        return [FactBrief(*row) for row in self._live_of(user, *columns)]

    def update_text(self, fact: Fact, text: str, embedding: np.ndarray) -> Fact:
        old = fact.text
        fact.text = text
        fact.embedding = vector_bytes(embedding)
        fact.version += 1
        self.session.flush()
        self._history(fact, "UPDATE", old, text)
        return fact

    def soft_delete(self, fact: Fact) -> None:
        """The row stays (ids are never reused, history keeps its events) but nothing of what
        it said does: text, embedding and metadata, and every text of its history."""
        fact.deleted_at = datetime.now(UTC)
        fact.text = ""
        fact.embedding = b""
        fact.meta = {}
        self.session.execute(
            update(FactHistory)
            .where(FactHistory.tenant_id == self.tenant_uuid, FactHistory.fact_id == fact.id)
            .values(old_text=None, new_text=None)
        )
        self.session.flush()
        self._history(fact, "DELETE", None, None)

    def history(self, fact: Fact) -> list[FactHistory]:
        return list(
            self.session.scalars(
                select(FactHistory)
                .where(FactHistory.tenant_id == self.tenant_uuid, FactHistory.fact_id == fact.id)
                .order_by(FactHistory.id)
            )
        )

    def note_unchanged(self, fact: Fact) -> None:
        """A decision to keep the fact as it is (inference's NONE), in its history."""
        self._history(fact, "NONE", fact.text, fact.text)

    def _history(self, fact: Fact, event: str, old: str | None, new: str | None) -> None:
        self.session.add(
            FactHistory(
                tenant_id=self.tenant_uuid,
                fact_id=fact.id,
                version=fact.version,
                event=event,
                old_text=old,
                new_text=new,
            )
        )
