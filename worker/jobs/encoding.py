"""Context-window encoding of facts, idempotent per (fact version, encoding config)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from backend.db.models import Fact, FactEncoding, Tenant
from backend.db.session import session_scope
from backend.engine_client import EngineClient
from backend.repositories.conversations import ConversationRepository
from backend.repositories.encodings import EncodingRepository
from backend.repositories.memories import FactRepository
from backend.services.memories import MemoryService
from gpu_runtime.composer import Turn
from gpu_runtime.runtime import FactToEncode
from gpu_runtime.types import EncodingConfig, FactKey, TenantId
from worker.jobs.progress import update_job
from worker.jobs.resources import engine_client, tenant_context

BATCH = 16


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
    fact_ids: list[int],
    job_id: str | None = None,
    engine: EngineClient | None = None,
) -> int:
    """Encode the current version of each live fact; returns how many were newly encoded.
    A redelivered job re-encodes nothing that is already ready (and still on the store)."""
    tenant, client = TenantId(tenant_id), engine or engine_client()
    config = client.encoding_config()
    update_job(job_id, status="running", attempt=True, progress_done=0)
    encoded = 0
    for start in range(0, len(fact_ids), BATCH):
        batch = fact_ids[start : start + BATCH]
        todo: list[FactToEncode] = []
        versions: dict[int, int] = {}
        with session_scope() as session:
            encodings = EncodingRepository(session, tenant)
            for fact in FactRepository(session, tenant).many(batch):
                key = FactKey.for_fact(tenant, str(fact.id), fact.version, config)
                row = encodings.get(fact.id, fact.version, config)
                if row is not None and row.status == "ready" and client.has(tenant, [key]):
                    continue
                todo.append(FactToEncode(key, fact.text, _window(session, tenant, fact, config)))
                versions[fact.id] = fact.version
        sizes = client.encode(tenant, todo) if todo else {}
        with session_scope() as session:
            facts = FactRepository(session, tenant)
            encodings = EncodingRepository(session, tenant)
            for item in todo:
                live = facts.get(int(item.key.fact_id))
                if live is None or live.version != versions[live.id]:
                    # Deleted or changed while we encoded: its KV must not outlive it.
                    client.purge(tenant, [item.key])
                    continue
                row = encodings.ensure_pending(live, config)
                _mark_ready(row, sizes.get(item.key, 0))
                encoded += 1
        update_job(job_id, progress_add=len(batch))
    update_job(job_id, status="succeeded", payload_merge={"encoded": encoded})
    return encoded


def _mark_ready(row: FactEncoding, nbytes: int) -> None:
    row.status, row.nbytes, row.tier, row.error = "ready", nbytes, "host+disk", ""


def reencode_stale(limit_per_tenant: int = 500) -> int:
    """Beat: schedule encoding for live facts lacking a ready encoding under the current
    config (new model, w or version, or a failed earlier job). Returns facts scheduled."""
    client = engine_client()
    config = client.encoding_config()
    scheduled = 0
    with session_scope() as session:
        tenants = [t.id for t in session.query(Tenant).filter(Tenant.deleted_at.is_(None))]
    for tenant_uuid in tenants:
        tenant = TenantId(str(tenant_uuid))
        with session_scope() as session:
            missing = EncodingRepository(session, tenant).missing(config, limit_per_tenant)
            if missing:
                MemoryService(tenant_context(session, tenant, client)).schedule_encoding(missing)
                scheduled += len(missing)
    return scheduled
