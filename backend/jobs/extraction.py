"""The extraction use case: Mem0's ``infer=true`` add (``backend.services.inference``): extract,
reconcile, apply; idempotent.

The model calls run outside any transaction; the decisions are applied in one transaction that
first locks the job row and checks it was not applied already, so a redelivered job (or two
deliveries at once) changes memories exactly once. Once applied, the job keeps Mem0's event
results and drops the conversation it was given.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from backend.db.models import Fact, JobStatus
from backend.db.session import session_scope
from backend.jobs.pipeline.progress import update_job
from backend.repositories.jobs import JobRepository
from backend.repositories.memories import FactRepository
from backend.resources import process_resources
from backend.runtime.client import EngineClient
from backend.services import inference as inf
from backend.services.mem0 import Scope
from gpu_runtime.client import protocol as p
from gpu_runtime.types import TenantId

logger = logging.getLogger(__name__)

NOTHING_EXTRACTED = (
    "the model extracted no memories from this conversation (nothing was added; add them with "
    "infer=false to store the messages as they are)"
)


def _generate(
    client: EngineClient, tenant: TenantId, system: str, user: str, schema: dict[str, Any]
) -> str | None:
    """The model's JSON for a system and user message; None if the prompt cannot fit."""
    composer = client.composer()
    rendered = composer.template.render(
        [{"role": "system", "content": system}, {"role": "user", "content": user}],
        add_generation_prompt=True,
    )
    tokens = composer.tokens(rendered)
    sampling: p.SamplingModel = inf.sampling(schema)
    if len(tokens) + sampling.max_tokens > client.model().max_model_len:
        return None
    text, finish = client.complete(tenant, tokens, sampling)
    if finish == "length":
        raise inf.InferenceError("the model's output reached max_tokens before its JSON closed")
    return text


def _fail(job_id: str, error: str) -> int:
    """Marks the job failed unless another delivery has applied it meanwhile."""
    with session_scope() as session:
        job = JobRepository(session, None).get(uuid.UUID(job_id), lock=True)
        if job is not None and not (job.payload or {}).get("applied"):
            job.status, job.error = JobStatus.FAILED, error
    return 0


def extract_memories(tenant_id: str, job_id: str, engine: EngineClient | None = None) -> int:
    """Returns how many decisions were applied (0 for a job applied before)."""
    resources = process_resources()
    tenant, client = TenantId(tenant_id), engine or resources.engine
    with session_scope() as session:
        job = JobRepository(session, uuid.UUID(tenant_id)).get(uuid.UUID(job_id))
        if job is None:
            return 0
        payload = dict(job.payload or {})
    if payload.get("applied"):
        return 0
    update_job(job_id, status=JobStatus.RUNNING, attempt=True)
    scope = Scope(**payload["scope"])
    request = inf.InferenceRequest.from_payload(payload["request"])
    categories = request.categories()
    agent_only = scope.user_id is None and scope.agent_id is not None
    system = "\n".join(filter(None, [inf.EXTRACT_PROMPT, request.instructions(agent_only)]))
    conversation = inf.conversation_text(request.messages)
    output = _generate(client, tenant, system, conversation, inf.extraction_schema(categories))
    if output is None:
        return _fail(job_id, "the conversation does not fit the context")
    facts = inf.parse_facts(output, categories)
    with session_scope() as session:
        similar = inf.similar_memories(resources.tenant_context(session, tenant, client), scope,
                                       [text for text, _ in facts])  # fmt: skip
        existing = [(owned.fact.public_id, owned.fact.text) for owned in similar]
    decisions = [inf.Decision("ADD", text, None) for text, _ in facts]
    if facts and existing:
        user = inf.reconcile_input([text for _, text in existing], [text for text, _ in facts])
        schema = inf.reconcile_schema(len(existing), len(facts))
        answer = _generate(client, tenant, inf.RECONCILE_PROMPT, user, schema)
        if answer is None:
            return _fail(job_id, "the memories do not fit the context")
        decisions = inf.parse_decisions(answer, len(existing))
    with session_scope() as session:
        job = JobRepository(session, None).get(uuid.UUID(job_id), lock=True)
        if job is None:
            return 0
        if (job.payload or {}).get("applied"):
            # Another delivery applied it while we asked the model; our "running" may have
            # landed after its "succeeded", so put that back.
            job.status = JobStatus.SUCCEEDED
            return 0
        ctx = resources.tenant_context(session, tenant, client)
        facts_now = FactRepository(session, tenant)
        targets: list[Fact | None] = [facts_now.get(memory_id) for memory_id, _ in existing]
        results = inf.apply(ctx, scope, request.metadata, decisions, targets, dict(facts))
        job.payload = {"scope": payload["scope"], "applied": True, "results": results}
        if not facts:  # said in the job and its event, never a silent empty success
            job.payload["message"] = NOTHING_EXTRACTED
            logger.warning("job %s: %s", job_id, NOTHING_EXTRACTED)
    update_job(job_id, status=JobStatus.SUCCEEDED, progress_done=1)
    return len(results)
