"""Scheduler half of the connector: decides what to claim and turns block ids into slots.

Torch-free and vLLM-free: the vLLM adapter passes plain ints and lists in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpu_runtime.connector.metadata import (
    CapturePiece,
    CaptureRequest,
    InjectionMetadata,
    LoadPiece,
    LoadRequest,
)
from gpu_runtime.connector.wire import TransferParams
from gpu_runtime.types import FactKey, MemorySegment, TenantId

# (tenant, keys) -> every key is stored and may be served
AvailabilityCheck = Callable[[TenantId, Iterable[FactKey]], bool]


def claimable_tokens(
    segment: MemorySegment, num_computed: int, prompt_len: int, available: AvailabilityCheck
) -> int:
    """Tokens past ``num_computed`` the connector can supply: the run of contiguous spans that
    starts at or before ``num_computed``, all or nothing per request (a missing fact -> 0, and
    vLLM prefills the text instead). At least one prompt token is left for vLLM to compute."""
    if not segment.spans or not available(segment.tenant, [s.key for s in segment.spans]):
        return 0
    cursor = num_computed
    for _, start, n in segment.spans:  # (unpacked: per fact of every request)
        if start + n <= cursor:
            continue
        if start > cursor:
            break
        cursor = start + n
    return max(0, min(cursor, prompt_len - 1) - num_computed)


def slots_for(block_ids: list[int], block_size: int, start: int, end: int) -> tuple[int, ...]:
    """Cache slots of prompt positions [start, end) given the request's block table."""
    return tuple(
        block_ids[p // block_size] * block_size + p % block_size for p in range(start, end)
    )


@dataclass
class _Tracked:
    params: TransferParams
    block_ids: list[int] = field(default_factory=list)
    pending_load: int = 0  # external tokens granted, waiting for the first schedule
    seen: bool = False  # scheduled at least once
    injected: int = 0  # tokens the connector supplied (reported when the request finishes)
    load_start: int = 0  # first prompt position of the last load


class SchedulerHalf:
    def __init__(
        self,
        block_size: int,
        available: AvailabilityCheck,
        scrub: bool = False,
        rotation_fault: int = 0,
    ) -> None:
        self.block_size = block_size
        self._available = available
        self._scrub = scrub
        # Tests only (INFERSCALE_FAULT_ROTATION_OFFSET): a broken re-rotation, for the fidelity
        # canary to catch. The pieces' positions only set where keys are rotated to.
        self._rotation_fault = rotation_fault
        self._requests: dict[str, _Tracked] = {}

    def num_new_matched_tokens(
        self, params: TransferParams | None, num_computed: int, prompt_len: int
    ) -> int:
        if params is None or params.inject is None:
            return 0
        return claimable_tokens(params.inject, num_computed, prompt_len, self._available)

    def after_alloc(
        self, req_id: str, params: TransferParams | None, block_ids: list[int], num_external: int
    ) -> None:
        if params is None:
            return
        tracked = self._requests.setdefault(req_id, _Tracked(params))
        tracked.block_ids = list(block_ids)
        tracked.pending_load = num_external
        tracked.injected = max(tracked.injected, num_external)

    def on_new(self, req_id: str, params: TransferParams | None, block_ids: list[int]) -> None:
        if params is not None:
            tracked = self._requests.setdefault(req_id, _Tracked(params))
            tracked.block_ids = list(block_ids)

    def on_cached(self, req_id: str, new_block_ids: list[int] | None, resumed: bool) -> None:
        tracked = self._requests.get(req_id)
        if tracked is None or new_block_ids is None:
            return
        tracked.block_ids = list(new_block_ids) if resumed else tracked.block_ids + new_block_ids

    def build(self, scheduled: Iterable[tuple[str, int, int]]) -> InjectionMetadata:
        """``scheduled``: (req_id, num_computed_tokens incl. external, num_scheduled_tokens)."""
        meta = InjectionMetadata()
        for req_id, num_computed, num_scheduled in scheduled:
            tracked = self._requests.get(req_id)
            if tracked is None:
                continue
            # Capturable this step: what is computed now, what was loaded for it, and on a
            # request's first step also what vLLM took from its prefix cache (identical prompt
            # prefixes in one batch of encodings share blocks, so those tokens are never computed).
            step_start = 0 if not tracked.seen else num_computed - tracked.pending_load
            tracked.seen = True
            if tracked.pending_load:
                meta.loads.append(self._load(req_id, tracked, num_computed))
                tracked.pending_load = 0
            capture = self._capture(req_id, tracked, step_start, num_computed + num_scheduled)
            if capture is not None:
                meta.captures.append(capture)
        return meta

    def load_failed(self, req_id: str, position: int) -> None:
        """A worker could not fill the request's blocks from ``position`` on: vLLM recomputes
        them, so they do not count as injected."""
        tracked = self._requests.get(req_id)
        if tracked is not None:
            tracked.injected = max(0, min(tracked.injected, position - tracked.load_start))

    def finished(self, req_id: str) -> int | None:
        """Forgets the request; the tokens injected into it, if it carried our parameters."""
        tracked = self._requests.pop(req_id, None)
        return tracked.injected if tracked is not None else None

    def _load(self, req_id: str, tracked: _Tracked, num_computed: int) -> LoadRequest:
        segment = tracked.params.inject
        assert segment is not None
        start, end = num_computed - tracked.pending_load, num_computed
        tracked.load_start = start
        fault = self._rotation_fault
        pieces = []
        for key, first, n in segment.spans:  # (unpacked: per fact of every request)
            lo = first if first > start else start
            hi = first + n if first + n < end else end
            if lo < hi:
                pieces.append(LoadPiece(key, lo - first, hi - lo, lo + fault))
        scrub: tuple[int, ...] = ()
        if self._scrub:
            scrub = tuple(
                tracked.block_ids[start // self.block_size : (end - 1) // self.block_size + 1]
            )
        blocks = tuple(tracked.block_ids)
        return LoadRequest(
            req_id, segment.tenant, tuple(pieces), blocks, self.block_size, start, end, scrub
        )

    def _capture(
        self, req_id: str, tracked: _Tracked, start: int, end: int
    ) -> CaptureRequest | None:
        pieces = []
        for span in tracked.params.capture:
            lo, hi = max(span.start, start), min(span.end, end)
            if lo < hi:
                pieces.append(
                    CapturePiece(
                        span.key,
                        lo - span.start,
                        hi - lo,
                        span.n_tokens,
                        lo,
                        slots_for(tracked.block_ids, self.block_size, lo, hi),
                    )
                )
        return CaptureRequest(req_id, tracked.params.tenant, tuple(pieces)) if pieces else None
