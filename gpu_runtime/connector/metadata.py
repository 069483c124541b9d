"""What the scheduler half hands the worker half each step: plain, picklable dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_runtime.types import FactKey, TenantId


@dataclass(frozen=True)
class LoadPiece:
    """Tokens ``[src_offset, src_offset + n)`` of a stored fact go to prompt positions
    ``[position, position + n)``."""

    key: FactKey
    src_offset: int
    n: int
    position: int


@dataclass(frozen=True)
class LoadRequest:
    req_id: str
    tenant: TenantId
    pieces: tuple[LoadPiece, ...]
    slots: tuple[int, ...]  # one cache slot per loaded token, in position order
    scrub_blocks: tuple[int, ...] = ()  # test mode: blocks to fill with garbage first


@dataclass(frozen=True)
class CapturePiece:
    """Tokens ``[dst_offset, dst_offset + n)`` of fact ``key`` (``total`` tokens long) were
    computed this step at prompt positions ``[position, position + n)``."""

    key: FactKey
    dst_offset: int
    n: int
    total: int
    position: int
    slots: tuple[int, ...]


@dataclass(frozen=True)
class CaptureRequest:
    req_id: str
    tenant: TenantId
    pieces: tuple[CapturePiece, ...]


@dataclass
class InjectionMetadata:
    loads: list[LoadRequest] = field(default_factory=list)
    captures: list[CaptureRequest] = field(default_factory=list)
