"""Fact encodings: which KV exists for which fact version and config."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import ColumnElement, delete, func, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import aliased
from sqlalchemy.orm.util import AliasedClass

from backend.db.models import EncodingStatus, Fact, FactEncoding
from backend.repositories.base import TenantScoped
from gpu_runtime.types import EncodingConfig


def _ready_now(
    row: type[FactEncoding] | AliasedClass[FactEncoding], config: EncodingConfig
) -> list[ColumnElement[bool]]:
    """``row`` is a ready encoding of its fact's current version (``Fact``, joined or
    correlated) under ``config``."""
    return [
        row.fact_version == Fact.version,
        row.model == config.model,
        row.window == config.window,
        row.encoding_version == config.version,
        row.status == EncodingStatus.READY,
    ]


class EncodingRepository(TenantScoped):
    def ensure_pending(self, fact: Fact, config: EncodingConfig) -> FactEncoding:
        """Idempotent: the row for (fact version, config) is created once, whoever asks."""
        self.session.execute(
            insert(FactEncoding)
            .values(
                tenant_id=self.tenant_uuid,
                fact_id=fact.id,
                fact_version=fact.version,
                model=config.model,
                window=config.window,
                encoding_version=config.version,
                status=EncodingStatus.PENDING,
            )
            .on_conflict_do_nothing()
        )
        row = self.get(fact.id, fact.version, config)
        assert row is not None
        return row

    def claim(
        self, facts: Sequence[Fact], config: EncodingConfig, hold_s: float
    ) -> dict[int, FactEncoding]:
        """Lock these facts' current-version rows under ``config`` until the transaction ends,
        in row order (two claimants never deadlock), read fresh: a job that waited here sees
        what the one before it stored. Keyed by fact row id; ``ensure_pending`` comes first.

        ``hold_s`` bounds the claim both ways, for this transaction only: waiting for another
        claimant's rows (``lock_timeout``: then Postgres refuses with ``LockNotAvailable``) and
        sitting idle while holding them (``idle_in_transaction_session_timeout``: a worker
        frozen or cut off from Postgres mid-batch loses its session, and its rows go to the
        next claimant, instead of holding them, and a tenant delete behind them, until TCP
        gives up). Longer than any one encode call lasts."""
        if not facts:
            return {}
        bound = str(max(1, round(hold_s * 1000)))  # ms
        self.session.execute(  # SET LOCAL both, in one round trip
            select(
                func.set_config("lock_timeout", bound, True),
                func.set_config("idle_in_transaction_session_timeout", bound, True),
            )
        )
        versions = {f.id: f.version for f in facts}
        rows = self.session.scalars(
            select(FactEncoding)
            .where(
                FactEncoding.tenant_id == self.tenant_uuid,
                FactEncoding.fact_id.in_(versions),
                FactEncoding.model == config.model,
                FactEncoding.window == config.window,
                FactEncoding.encoding_version == config.version,
            )
            .order_by(FactEncoding.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        return {r.fact_id: r for r in rows if r.fact_version == versions[r.fact_id]}

    def get(self, fact_id: int, fact_version: int, config: EncodingConfig) -> FactEncoding | None:
        return self.session.scalar(
            select(FactEncoding).where(
                FactEncoding.tenant_id == self.tenant_uuid,
                FactEncoding.fact_id == fact_id,
                FactEncoding.fact_version == fact_version,
                FactEncoding.model == config.model,
                FactEncoding.window == config.window,
                FactEncoding.encoding_version == config.version,
            )
        )

    def for_fact(self, fact_id: int) -> list[FactEncoding]:
        return list(
            self.session.scalars(
                select(FactEncoding)
                .where(FactEncoding.tenant_id == self.tenant_uuid, FactEncoding.fact_id == fact_id)
                .order_by(FactEncoding.id)
            )
        )

    def ready(self, config: EncodingConfig, after_id: int = 0, limit: int = 1000) -> list[Fact]:
        """Live facts whose current version is ready under ``config``, by id after ``after_id``."""
        return list(
            self.session.scalars(
                select(Fact)
                .join(FactEncoding, FactEncoding.fact_id == Fact.id)
                .where(
                    Fact.tenant_id == self.tenant_uuid,
                    Fact.deleted_at.is_(None),
                    Fact.id > after_id,
                    *_ready_now(FactEncoding, config),
                )
                .order_by(Fact.id)
                .limit(limit)
            )
        )

    def missing(self, config: EncodingConfig, limit: int = 500) -> list[Fact]:
        """Live facts whose current version has no ready encoding under ``config``."""
        ready = (
            select(FactEncoding.fact_id)
            .where(
                FactEncoding.tenant_id == self.tenant_uuid,
                FactEncoding.fact_id == Fact.id,
                *_ready_now(FactEncoding, config),
            )
            .exists()
        )
        return list(
            self.session.scalars(
                select(Fact)
                .where(Fact.tenant_id == self.tenant_uuid, Fact.deleted_at.is_(None), ~ready)
                .order_by(Fact.id)
                .limit(limit)
            )
        )

    def superseded(
        self, config: EncodingConfig, limit: int = 500
    ) -> list[tuple[FactEncoding, uuid.UUID]]:
        """Encodings under another config than ``config`` (an earlier model, w or encoding
        version: KV no runtime serving ``config`` reads) of facts that are gone or whose current
        version is ready under ``config``, each with its fact's public id (the key names it)."""
        now = aliased(FactEncoding)
        ready_now = (
            select(now.id)
            .where(now.fact_id == FactEncoding.fact_id, *_ready_now(now, config))
            .exists()
        )
        rows = self.session.execute(
            select(FactEncoding, Fact.public_id)
            .join(Fact, Fact.id == FactEncoding.fact_id)
            .where(
                FactEncoding.tenant_id == self.tenant_uuid,
                or_(
                    FactEncoding.model != config.model,
                    FactEncoding.window != config.window,
                    FactEncoding.encoding_version != config.version,
                ),
                or_(Fact.deleted_at.is_not(None), ready_now),
            )
            .order_by(FactEncoding.id)
            .limit(limit)
        )
        return [(row, public_id) for row, public_id in rows.tuples()]

    def delete(self, row_ids: Sequence[int]) -> None:
        self.session.execute(
            delete(FactEncoding).where(
                FactEncoding.tenant_id == self.tenant_uuid, FactEncoding.id.in_(row_ids)
            )
        )
