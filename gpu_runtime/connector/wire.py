"""The per-request ``kv_transfer_params`` wire format (built by the runtime, never by clients).

``{"tenant": str,
   "config": {"model", "window", "version"},
   "inject": [{"key": FactKey wire, "start": int, "n": int}, ...],   # memory segment
   "capture": [{"key": ..., "start": int, "n": int}, ...]}          # encoding: keep this KV}``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId


@dataclass(frozen=True)
class TransferParams:
    tenant: TenantId
    inject: MemorySegment | None
    capture: tuple[Span, ...]


def _spans(items: list[dict[str, Any]]) -> tuple[Span, ...]:
    return tuple(
        Span(FactKey.from_wire(item["key"]), int(item["start"]), int(item["n"])) for item in items
    )


def encode_params(
    tenant: TenantId,
    config: EncodingConfig,
    inject: tuple[Span, ...] = (),
    capture: tuple[Span, ...] = (),
) -> dict[str, Any]:
    def wire(spans: tuple[Span, ...]) -> list[dict[str, Any]]:
        return [{"key": s.key.to_wire(), "start": s.start, "n": s.n_tokens} for s in spans]

    return {
        "tenant": tenant.value,
        "config": {"model": config.model, "window": config.window, "version": config.version},
        "inject": wire(inject),
        "capture": wire(capture),
    }


def decode_params(raw: dict[str, Any] | None) -> TransferParams | None:
    """Parse; ``None`` for a request that carries no InferScale parameters."""
    if not raw or "tenant" not in raw:
        return None
    tenant = TenantId(str(raw["tenant"]))
    cfg = raw["config"]
    config = EncodingConfig(str(cfg["model"]), int(cfg["window"]), int(cfg["version"]))
    inject = _spans(raw.get("inject", []))
    capture = _spans(raw.get("capture", []))
    for span in capture:
        if span.key.tenant != tenant:
            raise ValueError("capture spans must belong to the request's tenant")
    segment = MemorySegment(tenant, config, inject) if inject else None
    return TransferParams(tenant, segment, capture)
