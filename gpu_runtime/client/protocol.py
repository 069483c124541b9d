"""The runtime service's internal API, version 1: request and response bodies (pydantic).

Every ``/v1`` route needs ``Authorization: Bearer <service token>``. The tenant is a field the
caller (the backend, a worker) sets; keys name facts of that tenant only, for the runtime's own
model (``ModelInfo.encoding_model``), so no request can reach another tenant's KV or another
model's. ``POST /v1/generate`` streams NDJSON, one ``GenerateEvent`` per line.

| route | body | answer |
| --- | --- | --- |
| ``GET /healthz`` | | 200 while the process and its engine live (no token) |
| ``GET /readyz`` | | 200 once the engine has started, else 503 (no token) |
| ``GET /metrics`` | | Prometheus text |
| ``GET /v1/model`` | | ``ModelInfo`` |
| ``GET /v1/tokenizer`` | | the served model's ``tokenizer.json`` |
| ``POST /v1/generate`` | ``GenerateRequest`` | NDJSON ``GenerateEvent`` s |
| ``POST /v1/encode`` | ``EncodeRequest`` | ``EncodeResult`` |
| ``POST /v1/purge`` | ``PurgeRequest`` | ``PurgeResult``, once every tier is clean |
| ``POST /v1/prefetch`` | ``KeysRequest`` | 202 at once |
| ``POST /v1/contains`` | ``KeysRequest`` | ``ContainsResult`` |
| ``POST /v1/placement`` | ``KeysRequest`` | ``PlacementResult``: each fact's tier |
| ``POST /v1/demote`` | ``DemoteRequest`` | 204 once the facts sit on that tier or below |
| ``GET /v1/stats?tenant=`` | | ``StatsResult`` |
| ``POST /v1/embed`` | ``EmbedRequest`` | ``EmbedResult`` (rev. 3; 503 ``no_embedder`` if off) |
| ``POST /v1/trace`` | ``TraceRequest`` | ``TraceResult``: the connector's hook timings (rev. 4) |

Revisions (``PROTOCOL_REVISION``, also in ``ModelInfo.protocol_revision``; additions only, so a
client of an older revision is still served):

* 1: the routes above.
* 2: ``SamplingModel.structured`` (the output constrained by a JSON schema, or to any JSON
  object, through vLLM's structured outputs: what the model writes always parses, unless
  ``max_tokens`` cuts it, which ``finish_reason: "length"`` says), ``presence_penalty`` and
  ``frequency_penalty``. Logprobs ride on ``delta`` events since revision 1.
* 3: ``POST /v1/embed`` (query embeddings on the runtime's device) and
  ``ModelInfo.query_embedder`` (the embedding model's name, ``None`` when not served);
  ``ModelInfo.fidelity`` and ``/readyz``'s ``fidelity``: the start-up canary's verdict.
* 4: ``POST /v1/trace`` (profiling: per worker process, the connector hooks' calls and time since
  the last reset; empty unless the runtime runs with ``INFERSCALE_TRACE_CONNECTOR=1``), and then
  ``GenerateEvent.scheduler_trace_ms`` on ``done``: the engine core's hook totals, where the
  scheduler half runs (``collective_rpc`` reaches only the workers).
* 5: ``DemoteRequest.ranks``: under tensor parallelism, demote only those ranks' slices.
* 6: ``SamplingModel.detokenize``: ``false`` streams token ids only (``text`` empty) and the
  client decodes them (``TextTokenizer.stream``, as vLLM would); not with stop strings or stop
  token ids, whose matching needs the runtime's own text.
* 7: ``SegmentModel.rows``: the segment's spans as rows ``[fact_id, fact_version, window,
  encoding_version, start, n_tokens]`` instead of ``spans``' objects (one or the other). The
  engine core reads the same rows, so the runtime passes them on as they are: per fact of every
  kv request, validating 50 span objects, building their keys and writing the rows again took
  ~0.3 ms of the runtime's loop (cold caches, the CPU box; ``bench.runtime.hook_cost``'s
  ``front`` paths). ``segment_model`` writes rows; a client sends ``spans`` to a runtime of an
  earlier revision (``for_revision``).

Errors: ``{"error": {"code", "message"}}`` with 400 (``prompt_too_long``, ``invalid_request``),
401 (``unauthorized``), 422 (``invalid_request``), 503 (``not_ready``, ``engine_dead``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from gpu_runtime.types import FactKey, MemorySegment, Span, SpanRow

API_VERSION = "v1"
PROTOCOL_REVISION = 7  # see the module docstring: what each revision added
RUNTIME_ID_HEADER = "X-InferScale-Runtime"  # changes on every start: clients refresh ModelInfo

TenantField = Annotated[str, StringConstraints(min_length=1, max_length=200)]
FactIdField = Annotated[str, StringConstraints(min_length=1, max_length=200)]
NonNegative = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=1 << 20)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def wire(body: BaseModel) -> str:
    """A request body as clients send it: fields left at their default are left out. The runtime
    refuses fields it does not know (``extra="forbid"``), so a request that uses nothing of a
    later revision is served by a runtime of an earlier one (an API upgraded before its runtime
    keeps working); the defaults are the protocol's, so leaving them out changes nothing."""
    return body.model_dump_json(exclude_defaults=True)


class KeyModel(_Body):
    """A fact key without its tenant and model (the request states the tenant; the model is
    the runtime's)."""

    fact_id: FactIdField
    fact_version: int = Field(ge=0)
    window: int = Field(ge=0)
    encoding_version: int = Field(ge=1)


class SpanModel(KeyModel):
    start: int = Field(ge=0)
    n_tokens: int = Field(ge=1)


# fact_id, fact_version, window, encoding_version, start, n_tokens (``types.SpanRow``)
SpanRowModel = tuple[FactIdField, NonNegative, NonNegative, Positive, NonNegative, Positive]


class SegmentModel(_Body):
    """The memory segment: ordered, disjoint spans, the first the preamble; as ``spans`` or, from
    revision 7, as ``rows`` (the same spans as rows, which the runtime passes on to the engine
    core as they are)."""

    window: int = Field(ge=0)
    version: int = Field(ge=1)
    spans: list[SpanModel] = Field(default_factory=list, max_length=4096)
    rows: list[SpanRowModel] = Field(default_factory=list, max_length=4096)  # revision 7

    @model_validator(mode="after")
    def _one_form(self) -> SegmentModel:
        if self.spans and self.rows:
            raise ValueError("give the segment's 'spans' or its 'rows', not both")
        return self

    def span_rows(self) -> list[SpanRow]:
        """The spans as rows, whichever form they came in."""
        if self.rows or not self.spans:
            return self.rows
        return [
            (s.fact_id, s.fact_version, s.window, s.encoding_version, s.start, s.n_tokens)
            for s in self.spans
        ]

    def with_spans(self) -> SegmentModel:
        """The same segment as ``spans`` (for a runtime of a revision before 7)."""
        if not self.rows:
            return self
        spans = [
            SpanModel(fact_id=f, fact_version=fv, window=w, encoding_version=v, start=at,
                      n_tokens=n)
            for f, fv, w, v, at, n in self.rows
        ]  # fmt: skip
        return SegmentModel(window=self.window, version=self.version, spans=spans)


class StructuredModel(_Body):
    """Constrains the output (revision 2): exactly one of a JSON schema or any JSON object.
    ``compact``: no whitespace between JSON tokens (a small model cannot spend its tokens on
    blank lines, which JSON allows, and run out before closing the document)."""

    json_schema: dict[str, Any] | None = None
    json_object: bool = False
    compact: bool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> StructuredModel:
        if (self.json_schema is not None) == self.json_object:
            raise ValueError("give exactly one of 'json_schema' or 'json_object': true")
        return self


class SamplingModel(_Body):
    max_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    logprobs: int | None = Field(default=None, ge=0, le=20)
    stop: list[str] = Field(default_factory=list, max_length=16)
    stop_token_ids: list[int] = Field(default_factory=list, max_length=64)
    ignore_eos: bool = False
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)  # revision 2
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)  # revision 2
    structured: StructuredModel | None = None  # revision 2
    # False: the request neither reuses nor leaves reusable vLLM prefix-cache blocks, so every
    # prompt token is computed or injected (benchmarks measure injection itself this way)
    prefix_cache: bool = True
    # False (revision 6): deltas carry token ids only and the client decodes them, so that the
    # runtime's one event loop does not (vLLM's detokenizer was 16% of it at 100 users)
    detokenize: bool = True

    @model_validator(mode="after")
    def _stops_need_text(self) -> SamplingModel:
        if not self.detokenize and (self.stop or self.stop_token_ids):
            raise ValueError("stop strings and stop token ids need 'detokenize': true")
        return self


class GenerateRequest(_Body):
    tenant: TenantField
    token_ids: TokenIds = Field(min_length=1)
    mode: Literal["kv", "prompt"]
    segment: SegmentModel | None = None  # required in kv mode
    sampling: SamplingModel = Field(default_factory=SamplingModel)
    # The tenant's share of the engine when tenants' requests wait for it (fairness.py).
    weight: float = Field(default=1.0, gt=0, le=100)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # not computed: injected plus vLLM's own prefix-cache hits
    injected_tokens: int  # supplied by the connector
    prefilled_tokens: int  # computed by the engine


class GenerateEvent(BaseModel):
    """``delta``: new tokens (and their top logprobs); ``done``: the last line of a stream that
    ended well; ``error``: the last line of one that did not."""

    event: Literal["delta", "done", "error"]
    token_ids: list[int] = Field(default_factory=list)
    text: str = ""
    logprobs: list[list[tuple[int, float]]] | None = None  # per token: (token id, logprob)
    finish_reason: str | None = None
    usage: Usage | None = None
    engine_ttft_ms: float | None = None  # request received -> first token, in the runtime
    # ``done``, when the runtime times the connector's hooks (rev. 4): the engine core's hook
    # totals in ms so far, cumulative (the scheduler half's hooks run there)
    scheduler_trace_ms: dict[str, float] | None = None
    code: str | None = None
    message: str | None = None


class EncodeItemModel(_Body):
    """Prefill ``token_ids`` (with ``inject`` spans injected, if any) and keep ``capture``."""

    token_ids: TokenIds = Field(min_length=1)
    capture: list[SpanModel] = Field(min_length=1, max_length=4096)
    inject: list[SpanModel] = Field(default_factory=list, max_length=4096)


class EncodeRequest(_Body):
    tenant: TenantField
    window: int = Field(ge=0)  # of the injected segment (if any); captured keys carry their own
    version: int = Field(default=1, ge=1)
    items: list[EncodeItemModel] = Field(min_length=1, max_length=1024)


class StoredFact(KeyModel):
    nbytes: int


class EncodeResult(BaseModel):
    stored: list[StoredFact]
    missing: list[KeyModel]  # captured but not stored: the encode failed for these


class KeysRequest(_Body):
    tenant: TenantField
    keys: list[KeyModel] = Field(max_length=65536)


class PurgeRequest(_Body):
    tenant: TenantField
    keys: list[KeyModel] = Field(default_factory=list, max_length=65536)
    all: bool = False  # every fact of the tenant


class PurgeResult(BaseModel):
    purged: int  # facts the workers held in memory or on disk
    epoch: int  # the tenant's prefix-cache epoch after the purge


class ContainsResult(BaseModel):
    present: list[bool]


class PlacementResult(BaseModel):
    tiers: list[Literal["gpu", "host", "disk"] | None]  # None: not stored


class DemoteRequest(KeysRequest):
    tier: Literal["host", "disk"]
    # Under tensor parallelism, only these ranks' slices (default: every rank's). A load waits
    # for the slowest rank, so one rank's slices on a slower tier is what a straggler costs, and
    # a rank that must read the store while the others hold their slices in memory is where a
    # damaged copy on disk fails one rank's load only (the TP engine tests).
    ranks: list[int] | None = Field(default=None, min_length=1, max_length=64)


class ModelInfo(BaseModel):
    runtime_id: str
    model: str  # the model directory's name
    encoding_model: str  # the model part of every key (includes a non-bf16 dtype)
    dtype: str
    max_model_len: int
    block_size: int
    vocab_size: int
    chat_template: str
    special_tokens: dict[str, str]  # bos_token, eos_token, ... for the template
    tokenizer_sha256: str  # of GET /v1/tokenizer
    server_pid: int
    worker_pids: list[int]
    workers: list[dict[str, Any]]  # per worker rank: device, layers, KV shape, fused kernel
    protocol_revision: int = 1  # what this runtime speaks (absent before revision 2)
    query_embedder: str | None = None  # POST /v1/embed's model, when this runtime serves it
    # The fidelity canary (revision 3): {"injection": "on"|"off", "reason", "canary": {...}};
    # injection off means kv and hybrid requests are served as prompt mode.
    fidelity: dict[str, Any] | None = None


class EmbedRequest(_Body):
    texts: list[Annotated[str, StringConstraints(max_length=20_000)]] = Field(
        min_length=1, max_length=256
    )


class EmbedResult(BaseModel):
    model: str
    dim: int
    vectors_b64: str  # [len(texts), dim] float32, little-endian, row-major, rows L2-normalised


class StatsResult(BaseModel):
    tenant: str | None
    workers: list[dict[str, Any]]  # per rank: residency per tier, counters, load latency
    epoch: int  # the tenant's prefix-cache epoch (0 when no tenant is named)
    # Per tenant (only the named one when a tenant is named): its side of the engine's fair
    # queue: running, waiting, admitted, queued, queue_wait_s, preempted, tokens served, counter,
    # weight.
    fairness: dict[str, dict[str, float]] = {}
    # This runtime's requests in flight by stage: how many, and the longest any has been in it
    # (s); only when no tenant is named.
    in_flight: dict[str, dict[str, float]] = {}


class TraceRequest(_Body):
    reset: bool = False  # start the worker hooks' count afresh after reading this one


class TraceResult(BaseModel):
    # Per worker process: {"enabled", "pid", "hooks": {hook: {"calls", "total_ms", "mean_us"}}}:
    # the worker half's hooks since the last reset (the scheduler half's: ``scheduler_trace_ms``)
    workers: list[dict[str, Any]]


class FairnessRequest(_Body):
    """The engine's share of requests at once (the rest wait in per-tenant queues)."""

    slots: int = Field(ge=1, le=65536)


class FairnessResult(BaseModel):
    slots: int
    running: int
    waiting: int
    tenants: dict[str, dict[str, float]]  # as in ``StatsResult.fairness``


class ErrorBody(BaseModel):
    error: dict[str, str]


# ---- from the runtime's own types ------------------------------------------------------------
def key_model(key: FactKey) -> KeyModel:
    return KeyModel(
        fact_id=key.fact_id,
        fact_version=key.fact_version,
        window=key.window,
        encoding_version=key.encoding_version,
    )


def span_model(span: Span) -> SpanModel:
    k = span.key
    return SpanModel(
        fact_id=k.fact_id,
        fact_version=k.fact_version,
        window=k.window,
        encoding_version=k.encoding_version,
        start=span.start,
        n_tokens=span.n_tokens,
    )


def segment_model(segment: MemorySegment) -> SegmentModel:
    """The segment as rows (revision 7; ``for_revision`` turns them into spans for an earlier
    runtime)."""
    rows = [span.row() for span in segment.spans]
    return SegmentModel(window=segment.config.window, version=segment.config.version, rows=rows)


def for_revision(request: GenerateRequest, revision: int) -> GenerateRequest:
    """``request`` as a runtime of protocol ``revision`` accepts it: its segment's rows as
    spans before revision 7."""
    segment = request.segment
    if revision >= 7 or segment is None or not segment.rows:
        return request
    return request.model_copy(update={"segment": segment.with_spans()})
