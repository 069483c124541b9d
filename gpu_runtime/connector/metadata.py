"""What the scheduler half hands the worker half each step: plain, picklable dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from gpu_runtime.types import FactKey, TenantId


def slot_array(block_ids: tuple[int, ...], block_size: int, start: int, end: int) -> np.ndarray:
    """Cache slots [end - start] int64 of prompt positions [start, end), vectorised."""
    positions = np.arange(start, end, dtype=np.int64)
    blocks = np.asarray(block_ids, dtype=np.int64)
    return blocks[positions // block_size] * block_size + positions % block_size


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
