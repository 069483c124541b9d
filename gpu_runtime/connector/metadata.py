"""What the connector's halves hand each other: plain, picklable dataclasses.

Scheduler -> workers, every step: ``InjectionMetadata`` (loads and captures, with cache slots).
Workers -> scheduler, every step: ``WorkerReport`` (facts stored, facts gone, loads that failed).
The halves may live in different processes (vLLM pickles both across), so nothing here holds a
tensor, a lock or a reference to the other half.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from gpu_runtime.types import FactKey, TenantId


def slot_array(block_ids: tuple[int, ...], block_size: int, start: int, end: int) -> np.ndarray:
    """Cache slots [end - start] int64 of prompt positions [start, end), vectorised: every
    slot of the blocks the range touches, then the range's."""
    first, last = start // block_size, (end - 1) // block_size + 1
    blocks = np.array(block_ids[first:last], dtype=np.int64)  # [B] the range's blocks
    slots = blocks[:, None] * block_size + np.arange(block_size)  # [B, block_size]
    at = first * block_size
    return slots.ravel()[start - at : end - at]


class LoadPiece(NamedTuple):
    """Tokens ``[src_offset, src_offset + n)`` of a stored fact go to prompt positions
    ``[position, position + n)``. A named tuple: a request makes one per fact, every step."""

    key: FactKey
    src_offset: int
    n: int
    position: int


@dataclass(frozen=True)
class LoadRequest:
    req_id: str
    tenant: TenantId
    pieces: tuple[LoadPiece, ...]
    block_ids: tuple[int, ...]  # the request's block table
    block_size: int
    start: int  # loaded prompt positions: [start, end)
    end: int
    scrub_blocks: tuple[int, ...] = ()  # test mode: blocks to fill with garbage first

    def slots(self) -> np.ndarray:
        """[end - start] int64: one cache slot per loaded token, in position order."""
        return slot_array(self.block_ids, self.block_size, self.start, self.end)


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


@dataclass
class WorkerReport:
    """What a worker half did to its store since its last report. The scheduler half's catalog
    applies it before it decides the next claims."""

    stored: list[FactKey] = field(default_factory=list)  # captured this step, on every tier
    dropped: list[FactKey] = field(default_factory=list)  # purged, or found corrupt and deleted
    dropped_tenants: list[TenantId] = field(default_factory=list)  # every fact purged
    # req_id -> the prompt position vLLM recomputes from (a fact of the request was gone)
    failed_loads: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.stored or self.dropped or self.dropped_tenants or self.failed_loads)

    def merge(self, other: WorkerReport) -> WorkerReport:
        """Reports of several worker ranks for one step, as one."""
        failed = dict(self.failed_loads)
        for req_id, position in other.failed_loads.items():
            failed[req_id] = min(position, failed.get(req_id, position))
        return WorkerReport(
            self.stored + other.stored,
            self.dropped + other.dropped,
            self.dropped_tenants + other.dropped_tenants,
            failed,
        )
