"""A tenant's live facts under a Mem0 filter (``backend.services.mem0_filters``), with their
owner's external id; and the tenant's entities (users, agents, apps, runs with memories)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, Select, func, select

from backend.db.models import EndUser, Fact
from backend.repositories.base import TenantScoped
from backend.repositories.memories import vector_from

Condition = ColumnElement[bool]
# The end user owning a tenant's memories given without a user_id (Mem0 scopes a memory by any
# of user, agent, app or run): a reserved external id, one control character, which Mem0's
# surface refuses as an entity id (a native call naming it reaches only its own tenant's rows).
SCOPE_OWNER = "\x01"


@dataclass(frozen=True)
class OwnedFact:
    fact: Fact
    user_id: str  # the owner's external id (SCOPE_OWNER: no user)


@dataclass(frozen=True)
class Entity:
    type: Literal["user", "agent", "app", "run"]
    name: str
    memories: int
    created_at: datetime
    updated_at: datetime


class ScopedFactRepository(TenantScoped):
    def _select(self, *columns: Any) -> Select[Any]:
        return (
            select(*columns)
            .join(EndUser, EndUser.id == Fact.user_id)
            .where(
                Fact.tenant_id == self.tenant_uuid,
                EndUser.tenant_id == self.tenant_uuid,
                Fact.deleted_at.is_(None),
            )
        )

    def page(self, condition: Condition, offset: int, limit: int) -> tuple[list[OwnedFact], int]:
        """Newest first."""
        query = self._select(Fact, EndUser.external_id).where(condition)
        total = self.session.scalar(select(func.count()).select_from(query.subquery())) or 0
        rows = self.session.execute(query.order_by(Fact.id.desc()).offset(offset).limit(limit))
        return [OwnedFact(fact, str(owner)) for fact, owner in rows], int(total)

    def matching(self, condition: Condition, limit: int) -> list[OwnedFact]:
        rows = self.session.execute(
            self._select(Fact, EndUser.external_id).where(condition).order_by(Fact.id).limit(limit)
        )
        return [OwnedFact(fact, str(owner)) for fact, owner in rows]

    def vectors(
        self, condition: Condition, limit: int
    ) -> tuple[list[int], list[str], npt.NDArray[np.float32]]:
        """Row ids, texts and embeddings of at most ``limit`` matching facts."""
        rows = self.session.execute(
            self._select(Fact.id, Fact.text, Fact.embedding)
            .where(condition)
            .order_by(Fact.id)
            .limit(limit)
        ).all()
        if not rows:
            return [], [], np.zeros((0, 0), dtype=np.float32)
        vectors = np.stack([vector_from(r[2]) for r in rows])
        return [int(r[0]) for r in rows], [str(r[1]) for r in rows], vectors

    def by_rows(self, row_ids: list[int]) -> list[OwnedFact]:
        """In the order asked."""
        if not row_ids:
            return []
        rows = self.session.execute(
            self._select(Fact, EndUser.external_id).where(Fact.id.in_(row_ids))
        )
        found = {fact.id: OwnedFact(fact, str(owner)) for fact, owner in rows}
        return [found[i] for i in row_ids if i in found]

    def entities(self, limit: int = 10_000) -> list[Entity]:
        """Every user, agent, app and run that has live memories, with their count."""
        found: list[Entity] = []
        columns: dict[Literal["user", "agent", "app", "run"], Any] = {
            "user": EndUser.external_id,
            "agent": Fact.agent_id,
            "app": Fact.app_id,
            "run": Fact.run_id,
        }
        for kind, column in columns.items():
            first, last = func.min(Fact.created_at), func.max(Fact.updated_at)
            stats = (column, func.count(Fact.id), first, last)
            query = (
                self._select(*stats)
                .where(column.is_not(None), column != SCOPE_OWNER)
                .group_by(column)
                .order_by(column)
                .limit(limit)
            )
            found += [Entity(kind, str(name), int(n), first, last)
                      for name, n, first, last in self.session.execute(query)]  # fmt: skip
        return found
