"""The encoding use cases: context-window encoding of facts through the runtime, idempotent per
(fact version, encoding config), beat's sweep for facts whose KV is missing or lost, and its
sweep of KV that an earlier config wrote and no runtime reads any more."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from backend.core.config import get_settings
from backend.db.models import EncodingStatus, Fact, FactEncoding, JobStatus
from backend.db.session import session_scope
from backend.jobs.pipeline.progress import update_job
from backend.repositories.conversations import ConversationRepository
from backend.repositories.encodings import EncodingRepository
from backend.repositories.memories import FactRepository
from backend.repositories.tenants import TenantRepository
from backend.resources import process_resources
from backend.runtime.client import EngineClient
from backend.services.memories import MemoryService, fact_key, recorded_key
from gpu_runtime.client.composer import EncodeItem, Turn
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

BATCH = 16
CLAIM_MARGIN_S = 60.0  # a batch's claim outlasts its encode call by this much


def _window(
    session: Session, tenant: TenantId, fact: Fact, config: EncodingConfig
) -> tuple[Turn, ...]:
    if fact.source_turn_id is None or config.window == 0:
        return ()
    conversations = ConversationRepository(session, tenant)
    turn = conversations.turn(fact.source_turn_id)
    if turn is None:
        return ()
    return tuple(
        Turn(t.speaker, t.text) for t in conversations.preceding_turns(turn, config.window)
    )


def encode_facts(
    tenant_id: str,
    fact_ids: list[str],
    job_id: str | None = None,
    engine: EngineClient | None = None,
) -> int:
    """Encode the current version of each live fact (by public id) through the runtime; returns
    how many were newly encoded. A redelivered job re-encodes nothing already ready and stored."""
    tenant, client = TenantId(tenant_id), engine or process_resources().engine
    public_ids = [uuid.UUID(str(i)) for i in fact_ids]
    config = client.encoding_config()
    composer = client.composer()
    update_job(job_id, status=JobStatus.RUNNING, attempt=True, progress_done=0)
    encoded = 0
    for start in range(0, len(public_ids), BATCH):
        batch = public_ids[start : start + BATCH]
        with session_scope() as session:  # the rows exist, committed, before anyone claims them
            encodings = EncodingRepository(session, tenant)
            for fact in FactRepository(session, tenant).many(batch):
                encodings.ensure_pending(fact, config)
        with session_scope() as session:
            # The claim holds until this batch is stored and marked: a concurrent job for the
            # same facts (a redelivery, beat's sweep, an import's session worker) waits, then
            # finds them ready and stored, and never writes a fact's KV twice.
            facts = FactRepository(session, tenant).many(batch)
            claimed = EncodingRepository(session, tenant).claim(facts, config, _claim_hold_s())
            facts = [f for f in facts if f.id in claimed]  # else a newer version: its own job
            keys = {f.id: fact_key(tenant, f, config) for f in facts}
            ready = [f for f in facts if claimed[f.id].status == EncodingStatus.READY]
            kept = client.stored(tenant, [keys[f.id] for f in ready])
            done = {f.id for f, stored in zip(ready, kept, strict=True) if stored}
            todo: list[EncodeItem] = []
            for fact in (f for f in facts if f.id not in done):
                key = keys[fact.id]
                turns = _window(session, tenant, fact, config)
                todo.append(composer.encode_item(key, fact.text, turns, config.window))
            sizes = client.encode(tenant, config, todo) if todo else {}
            encoded += _mark_stored(tenant, client, sizes, claimed)
        update_job(job_id, progress_add=len(batch))
    update_job(job_id, status=JobStatus.SUCCEEDED, payload_merge={"encoded": encoded})
    return encoded


def _claim_hold_s() -> float:
    """How long a batch's claim may wait or be held: the runtime client's timeout bounds the
    encode call in between, and a minute covers the rest of the batch."""
    return get_settings().runtime_timeout_s + CLAIM_MARGIN_S


def _mark_stored(
    tenant: TenantId,
    client: EngineClient,
    sizes: dict[FactKey, int],
    claimed: dict[int, FactEncoding],
) -> int:
    """Mark the encoded facts' claimed rows ready, unless a fact was deleted or changed while it
    was encoded (read in a fresh session): then its KV must not outlive it. Returns how many."""
    with session_scope() as fresh:
        live = FactRepository(fresh, tenant).many([uuid.UUID(k.fact_id) for k in sizes])
        current = {str(f.public_id): (f.id, f.version) for f in live}
    ready = 0
    for key, nbytes in sizes.items():
        fact = current.get(key.fact_id)
        if fact is None or fact[1] != key.fact_version:
            client.purge(tenant, [key])
            continue
        _mark_ready(claimed[fact[0]], nbytes)
        ready += 1
    return ready


def _mark_ready(row: FactEncoding, nbytes: int) -> None:
    row.status, row.nbytes, row.tier, row.error = EncodingStatus.READY, nbytes, "disk", ""


def _live_tenants() -> list[TenantId]:
    """Every live tenant, read once (beat's sweeps then open a transaction per tenant)."""
    with session_scope() as session:
        return [TenantId(str(t)) for t in TenantRepository(session).live_ids()]


def reencode_stale(limit_per_tenant: int = 500) -> int:
    """Beat: schedule encoding for live facts lacking a ready encoding under the current
    config (new model, w or version, or a failed earlier job), and for facts recorded ready
    whose KV the runtime no longer has (a corrupt or truncated file is deleted when it is
    found on load, and never injected). Returns facts scheduled."""
    resources = process_resources()
    client = resources.engine
    config = client.encoding_config()
    scheduled = 0
    for tenant in _live_tenants():
        with session_scope() as session:
            encodings = EncodingRepository(session, tenant)
            todo = encodings.missing(config, limit_per_tenant) + _lost(
                encodings, client, tenant, config
            )
            if todo:
                MemoryService(resources.tenant_context(session, tenant)).schedule_encoding(todo)
                scheduled += len(todo)
    return scheduled


def _lost(
    encodings: EncodingRepository, client: EngineClient, tenant: TenantId, config: EncodingConfig
) -> list[Fact]:
    """Facts recorded ready whose durable KV is gone, a batch of keys per runtime call."""
    lost: list[Fact] = []
    after = 0
    while batch := encodings.ready(config, after_id=after):
        keys = [fact_key(tenant, f, config) for f in batch]
        lost += [f for f, kept in zip(batch, client.stored(tenant, keys), strict=True) if not kept]
        after = batch[-1].id
    return lost


def purge_superseded(limit_per_tenant: int = 500, engine: EngineClient | None = None) -> int:
    """Beat: KV written under an earlier config (model, w or encoding version), which no
    runtime serving today's config reads, off every tier of every replica, then its rows. Only
    once the fact's current version is ready under today's config (or the fact is gone), so a
    fact is never left without KV in between. Returns the encodings purged."""
    client = engine or process_resources().engine
    config = client.encoding_config()
    purged = 0
    for tenant in _live_tenants():
        with session_scope() as session:
            encodings = EncodingRepository(session, tenant)
            rows = encodings.superseded(config, limit_per_tenant)
            if not rows:
                continue
            # The KV before its rows: a failed purge keeps the rows, and the next sweep retries.
            client.purge(tenant, [recorded_key(tenant, public_id, row) for row, public_id in rows])
            encodings.delete([row.id for row, _ in rows])
            purged += len(rows)
    return purged
