"""The per-request ``kv_transfer_params`` wire format (built by the runtime, never by clients).

``{"inferscale": "<JSON text>"}`` where the text is
``{"tenant": str, "model": str, "version": int, "window": int,
   "inject": [[fact_id, fact_version, key_window, key_version, start, n], ...],  # memory segment
   "capture": [[...same...], ...]}``                                  # encoding: keep this KV

One string on purpose: vLLM deep-copies every request's sampling parameters, and a nested
structure of a few hundred objects for 50 facts cost more than the rest of our hooks together.
Every key belongs to the request's tenant and is for the engine's model, so those are stated
once; a key's own window and encoding version are kept (the preamble is encoded at w=0 under
any config). The runtime writes the text in its front-end process; the scheduler half parses it
in the engine core, once per request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpu_runtime.types import (
    EncodingConfig,
    MemorySegment,
    Span,
    SpanRow,
    TenantId,
    process_keys,
)

WIRE_KEY = "inferscale"


@dataclass(frozen=True)
class TransferParams:
    tenant: TenantId
    inject: MemorySegment | None
    capture: tuple[Span, ...]


def span_rows(tenant: TenantId, model: str, spans: tuple[Span, ...]) -> list[SpanRow]:
    """``spans`` as the wire's rows; each key must be ``tenant``'s, for ``model``."""
    for s in spans:
        if s.key.tenant != tenant or s.key.model != model:
            raise ValueError(f"{s.key} does not belong to {tenant} under model {model!r}")
    return [s.row() for s in spans]


def _params(
    tenant: TenantId, config: EncodingConfig, inject: Sequence[SpanRow], capture: Sequence[SpanRow]
) -> dict[str, Any]:
    body = {
        "tenant": tenant.value,
        "model": config.model,
        "version": config.version,
        "window": config.window,
        "inject": inject,
        "capture": capture,
    }
    return {WIRE_KEY: json.dumps(body, separators=(",", ":"))}


def encode_params(
    tenant: TenantId,
    config: EncodingConfig,
    inject: tuple[Span, ...] = (),
    capture: tuple[Span, ...] = (),
) -> dict[str, Any]:
    if inject:
        MemorySegment(tenant, config, inject)  # validates the spans before they travel
    return _params(
        tenant,
        config,
        span_rows(tenant, config.model, inject),
        span_rows(tenant, config.model, capture),
    )


def segment_params(segment: MemorySegment) -> dict[str, Any]:
    """A kv request's parameters: its segment injected. A segment built from a request's rows
    (``MemorySegment.from_rows``: validated, its keys the tenant's for this model) sends them
    on as they are; rebuilding 50 rows from the keys was ~0.1 ms of the runtime's loop."""
    rows = segment.rows
    if rows is None:
        rows = span_rows(segment.tenant, segment.config.model, segment.spans)
    return _params(segment.tenant, segment.config, rows, ())


def decode_params(raw: dict[str, Any] | None) -> TransferParams | None:
    """Parse; ``None`` for a request that carries no InferScale parameters."""
    if not raw or WIRE_KEY not in raw:
        return None
    body = json.loads(str(raw[WIRE_KEY]))
    tenant = TenantId(str(body["tenant"]))
    model = str(body["model"])
    config = EncodingConfig(model, int(body["window"]), int(body["version"]))
    # A request names the same few hundred facts of its user again and again, and building 50
    # frozen keys was most of decoding one (~2 µs each): each is built once in this process.
    # (JSON keeps the str and int fields as ``encode_params`` wrote them: no conversions.)
    keys = process_keys(model)
    inject = keys.spans(tenant, body.get("inject", ()))
    capture = keys.spans(tenant, body.get("capture", ()))
    # Not validated again: the runtime validated the segment before it wrote these rows.
    segment = MemorySegment.trusted(tenant, config, inject) if inject else None
    return TransferParams(tenant, segment, capture)


def params_of_request(request: Any) -> TransferParams | None:
    """A vLLM request's parameters (the scheduler half's view of it)."""
    return decode_params(getattr(request, "kv_transfer_params", None))


def params_of_sampling(sampling_params: Any) -> TransferParams | None:
    """A new request's parameters as its ``SamplingParams`` carry them."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    return decode_params(extra.get("kv_transfer_params"))
