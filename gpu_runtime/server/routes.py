"""The internal API's routes (``gpu_runtime.client.protocol`` documents them): translation between
wire models and the runtime's own types, nothing more."""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import AsyncIterator

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from gpu_runtime.client import protocol as p
from gpu_runtime.client.inflight import tracked_of
from gpu_runtime.generation import (
    Delta,
    EncodeJob,
    Finish,
    Generation,
    Mode,
    Sampling,
    Structured,
)
from gpu_runtime.query_embedder import MODEL_NAME
from gpu_runtime.runtime import InjectionRuntime
from gpu_runtime.server import metrics
from gpu_runtime.server.deps import (
    EmbedBody,
    GenerateBody,
    KeysBody,
    RuntimeDep,
    ServiceTokenDep,
    StateDep,
)
from gpu_runtime.server.errors import NoEmbedderError, status_of
from gpu_runtime.server.state import ServerState
from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId

logger = logging.getLogger(__name__)
probes = APIRouter(tags=["probes"])
api = APIRouter(prefix=f"/{p.API_VERSION}", dependencies=[ServiceTokenDep], tags=["runtime"])


def _key(runtime: InjectionRuntime, tenant: TenantId, k: p.KeyModel) -> FactKey:
    return runtime.key(tenant, k.fact_id, k.fact_version, k.window, k.encoding_version)


def _span(runtime: InjectionRuntime, tenant: TenantId, s: p.SpanModel) -> Span:
    return Span(_key(runtime, tenant, s), s.start, s.n_tokens)


def segment_of(runtime: InjectionRuntime, tenant: TenantId, seg: p.SegmentModel) -> MemorySegment:
    config = EncodingConfig(runtime.encoding_model, seg.window, seg.version)
    return MemorySegment.from_rows(tenant, config, seg.span_rows(), runtime.fact_keys)


# ---- probes (no token: orchestrators call them) ------------------------------------------
@probes.get("/healthz")
async def healthz(state: StateDep) -> JSONResponse:
    runtime = state.runtime
    dead = state.failure is not None or (runtime is not None and runtime.dead)
    engine = "dead" if dead else ("ready" if runtime is not None else "starting")
    return JSONResponse({"status": "down" if dead else "ok", "engine": engine},
                        status_code=503 if dead else 200)  # fmt: skip


@probes.get("/readyz")
async def readyz(state: StateDep) -> JSONResponse:
    ready = state.runtime is not None and not state.runtime.dead
    body: dict[str, object] = {"ready": ready}
    if state.runtime is not None:  # ready either way: a failed canary serves prompt mode
        body["fidelity"] = _fidelity(state)
    return JSONResponse(body, status_code=200 if ready else 503)


def _fidelity(state: ServerState) -> dict[str, object]:
    runtime = state.runtime
    off = runtime.injection_off if runtime is not None else None
    return {
        "injection": "off" if off else "on",
        "reason": off,
        "canary": state.canary.as_dict() if state.canary is not None else None,
    }


@probes.get("/metrics", dependencies=[ServiceTokenDep])
async def prometheus(state: StateDep) -> Response:
    workers = await state.runtime.stats(None) if state.runtime is not None else []
    fairness = state.runtime.gate.snapshot() if state.runtime is not None else {}
    return PlainTextResponse(
        metrics.render(workers, fairness, state.inflight.snapshot()),
        media_type="text/plain; version=0.0.4",
    )


# ---- the API ------------------------------------------------------------------------------
@api.get("/model", response_model=p.ModelInfo)
async def model(state: StateDep, runtime: RuntimeDep) -> p.ModelInfo:
    return p.ModelInfo(
        runtime_id=state.runtime_id,
        model=state.settings.resolved_model_path.name,
        encoding_model=runtime.encoding_model,
        dtype=runtime.dtype,
        max_model_len=runtime.max_model_len,
        block_size=runtime.block_size,
        vocab_size=runtime.vocab_size,
        chat_template=state.assets.chat_template,
        special_tokens=state.assets.special_tokens,
        tokenizer_sha256=state.assets.sha256,
        server_pid=os.getpid(),
        worker_pids=[int(w["pid"]) for w in state.workers],
        workers=state.workers,
        protocol_revision=p.PROTOCOL_REVISION,
        query_embedder=MODEL_NAME if state.embedder is not None else None,
        fidelity=_fidelity(state),
    )


@api.post("/embed", response_model=p.EmbedResult)
async def embed(body: EmbedBody, state: StateDep) -> p.EmbedResult:
    if state.embedder is None:
        raise NoEmbedderError("this runtime does not serve query embeddings (see /v1/model)")
    vectors = await state.embedder.embed(list(body.texts))  # [n, dim] float32
    raw = vectors.contiguous().numpy().astype("<f4", copy=False).tobytes()
    return p.EmbedResult(
        model=MODEL_NAME, dim=state.embedder.dim, vectors_b64=base64.b64encode(raw).decode()
    )


@api.get("/tokenizer")
async def tokenizer(state: StateDep) -> Response:
    return Response(state.assets.tokenizer_json, media_type="application/json")


@api.post("/generate")
async def generate(body: GenerateBody, runtime: RuntimeDep, http: Request) -> StreamingResponse:
    tenant = TenantId(body.tenant)
    tracked = tracked_of(http.scope)
    if tracked is not None:
        tracked.tenant = tenant.value
    segment = segment_of(runtime, tenant, body.segment) if body.segment is not None else None
    s = body.sampling
    sampling = Sampling(
        s.max_tokens, s.temperature, s.top_p, s.seed, s.logprobs, tuple(s.stop),
        tuple(s.stop_token_ids), s.ignore_eos, s.prefix_cache, s.presence_penalty,
        s.frequency_penalty, _structured(s.structured), s.detokenize,
    )  # fmt: skip
    mode = Mode(body.mode)
    events = runtime.generate(
        Generation(tenant, tuple(body.token_ids), mode, segment, sampling, body.weight), tracked
    )
    # The first event is awaited here, so that what fails before any token (a prompt too long,
    # a bad segment, the engine down) is an HTTP error, not a stream that stops.
    try:
        first = await anext(events)
    except Exception:
        metrics.REQUESTS.labels(mode.value, "refused").inc()
        raise
    lines = _ndjson(first, events, mode)
    if tracked is not None:
        tracked.body = lines
    return StreamingResponse(lines, media_type="application/x-ndjson")


def _structured(wanted: p.StructuredModel | None) -> Structured | None:
    if wanted is None:
        return None
    schema = json.dumps(wanted.json_schema) if wanted.json_schema is not None else None
    return Structured(schema, wanted.json_object, wanted.compact)


async def _ndjson(
    first: Delta | Finish, rest: AsyncIterator[Delta | Finish], mode: Mode
) -> AsyncIterator[str]:
    event: Delta | Finish | None = first
    try:
        while event is not None:
            yield _line(event, mode)
            event = await anext(rest, None)
    except Exception as exc:  # mid-stream: the stream ends with an error line
        _, code = status_of(exc)
        logger.warning("generate failed mid-stream (%s): %s", code, exc)
        metrics.REQUESTS.labels(mode.value, "failed").inc()
        error = p.GenerateEvent(event="error", code=code, message=str(exc) or type(exc).__name__)
        yield error.model_dump_json(exclude_none=True) + "\n"


def delta_line(event: Delta) -> str:
    """A ``GenerateEvent`` of kind ``delta``, written directly: one per token of every open
    stream, so no model is built for it (``test_protocol`` checks the two agree)."""
    body: dict[str, object] = {"event": "delta", "token_ids": event.token_ids, "text": event.text}
    if event.logprobs:
        body["logprobs"] = event.logprobs
    return json.dumps(body, separators=(",", ":")) + "\n"


def _line(event: Delta | Finish, mode: Mode) -> str:
    if isinstance(event, Delta):
        return delta_line(event)
    usage = p.Usage(
        prompt_tokens=event.prompt_tokens,
        completion_tokens=event.completion_tokens,
        cached_tokens=event.cached_tokens,
        injected_tokens=event.injected_tokens,
        prefilled_tokens=event.prompt_tokens - event.cached_tokens,
    )
    metrics.REQUESTS.labels(mode.value, "ok").inc()
    if event.engine_ttft_ms is not None:
        metrics.TTFT.labels(mode.value).observe(event.engine_ttft_ms / 1000)
    metrics.TOKENS.labels("injected").inc(usage.injected_tokens)
    metrics.TOKENS.labels("prefix_cache").inc(usage.cached_tokens - usage.injected_tokens)
    metrics.TOKENS.labels("prefilled").inc(usage.prefilled_tokens)
    done = p.GenerateEvent(
        event="done", finish_reason=event.finish_reason, usage=usage,
        engine_ttft_ms=event.engine_ttft_ms, scheduler_trace_ms=event.scheduler_trace_ms,
    )  # fmt: skip
    return done.model_dump_json(exclude_none=True) + "\n"


@api.post("/encode", response_model=p.EncodeResult)
async def encode(body: p.EncodeRequest, runtime: RuntimeDep) -> p.EncodeResult:
    tenant = TenantId(body.tenant)
    jobs = [
        EncodeJob(
            tuple(item.token_ids),
            tuple(_span(runtime, tenant, s) for s in item.capture),
            tuple(_span(runtime, tenant, s) for s in item.inject),
        )
        for item in body.items
    ]
    config = EncodingConfig(runtime.encoding_model, body.window, body.version)
    stored, missing = await runtime.encode(tenant, config, jobs)
    metrics.ENCODED.inc(len(stored))
    return p.EncodeResult(
        stored=[p.StoredFact(**p.key_model(k).model_dump(), nbytes=n) for k, n in stored.items()],
        missing=[p.key_model(k) for k in missing],
    )


@api.post("/purge", response_model=p.PurgeResult)
async def purge(body: p.PurgeRequest, runtime: RuntimeDep) -> p.PurgeResult:
    """Returns once every worker's tiers and the disk are clean and the epoch is bumped."""
    tenant = TenantId(body.tenant)
    if body.all:
        await runtime.purge_tenant(tenant)
        purged = 0
    else:
        purged = await runtime.purge(tenant, [_key(runtime, tenant, k) for k in body.keys])
    return p.PurgeResult(purged=purged, epoch=runtime.epoch(tenant))


@api.post("/prefetch", status_code=202)
async def prefetch(body: KeysBody, runtime: RuntimeDep) -> dict[str, int]:
    tenant = TenantId(body.tenant)
    runtime.prefetch(tenant, [_key(runtime, tenant, k) for k in body.keys])
    return {"accepted": len(body.keys)}


@api.post("/contains", response_model=p.ContainsResult)
async def contains(body: KeysBody, runtime: RuntimeDep) -> p.ContainsResult:
    tenant = TenantId(body.tenant)
    keys = [_key(runtime, tenant, k) for k in body.keys]
    return p.ContainsResult(present=runtime.contains(tenant, keys))


@api.post("/placement", response_model=p.PlacementResult)
async def placement(body: KeysBody, runtime: RuntimeDep) -> p.PlacementResult:
    tenant = TenantId(body.tenant)
    tiers = await runtime.placement(tenant, [_key(runtime, tenant, k) for k in body.keys])
    return p.PlacementResult.model_validate({"tiers": tiers})


@api.post("/demote", status_code=204)
async def demote(body: p.DemoteRequest, runtime: RuntimeDep) -> Response:
    """Moves facts down to a slower tier (offload benchmarks; room ahead of a known burst)."""
    tenant = TenantId(body.tenant)
    keys = [_key(runtime, tenant, k) for k in body.keys]
    await runtime.demote(tenant, keys, body.tier, body.ranks)
    return Response(status_code=204)


@api.get("/fairness", response_model=p.FairnessResult)
async def fairness(runtime: RuntimeDep) -> p.FairnessResult:
    gate = runtime.gate
    return p.FairnessResult(
        slots=gate.slots, running=gate.running, waiting=gate.waiting, tenants=gate.snapshot()
    )


@api.put("/fairness", response_model=p.FairnessResult)
async def resize_fairness(body: p.FairnessRequest, runtime: RuntimeDep) -> p.FairnessResult:
    """Resizes the fair gate live (an operator's knob; the fairness bench's "off" is a gate as
    wide as the engine's batch)."""
    runtime.gate.resize(body.slots)
    return await fairness(runtime)


@api.post("/trace", response_model=p.TraceResult)
async def trace(body: p.TraceRequest, runtime: RuntimeDep) -> p.TraceResult:
    return p.TraceResult(workers=await runtime.trace(body.reset))


@api.get("/stats", response_model=p.StatsResult)
async def stats(
    runtime: RuntimeDep,
    state: StateDep,
    tenant: str | None = Query(default=None, min_length=1, max_length=200),
) -> p.StatsResult:
    who = TenantId(tenant) if tenant is not None else None
    workers = await runtime.stats(who)
    fairness = runtime.gate.snapshot()
    if tenant is not None:
        fairness = {tenant: fairness[tenant]} if tenant in fairness else {}
    return p.StatsResult(
        tenant=tenant,
        workers=workers,
        epoch=runtime.epoch(who) if who is not None else 0,
        fairness=fairness,
        in_flight=state.inflight.snapshot() if tenant is None else {},
    )
