"""Segment allocation and compaction planning for the packed store. Torch-free, no I/O.

Every dead extent (deleted or superseded) is overwritten with zeros when it dies, so dead space
holds nothing readable; compaction only gives the space back. It copies a segment's live
extents to the end of the log and drops the segment file. A segment is worth compacting once
most of it is dead; a segment with nothing live is simply dropped. The index log is rewritten
(one record per live batch) once it holds many more entries than live facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_runtime.store.disk.extent_index import TenantIndex

SEGMENT_PREFIX, SEGMENT_SUFFIX = "seg-", ".seg"


def segment_name(segment: int) -> str:
    return f"{SEGMENT_PREFIX}{segment:08d}{SEGMENT_SUFFIX}"


def segment_id(name: str) -> int | None:
    """The id in a segment file's name; ``None`` for any other file."""
    if not (name.startswith(SEGMENT_PREFIX) and name.endswith(SEGMENT_SUFFIX)):
        return None
    digits = name[len(SEGMENT_PREFIX) : -len(SEGMENT_SUFFIX)]
    return int(digits) if digits.isdigit() else None


@dataclass(frozen=True)
class Policy:
    segment_bytes: int = 64 << 20  # a segment takes appends until it is this large
    dead_fraction: float = 0.5  # compact a segment once more than this share of it is dead
    min_dead_bytes: int = 1 << 20  # ... and at least this much (small tenants: not worth it)
    index_slack: int = 4  # rewrite the index log at this many entries per live fact ...
    min_index_entries: int = 1024  # ... once it holds at least this many

    def __post_init__(self) -> None:
        if self.segment_bytes <= 0 or not 0 < self.dead_fraction < 1:
            raise ValueError("segment_bytes must be positive and dead_fraction in (0, 1)")


@dataclass(frozen=True)
class SegmentUse:
    segment: int
    size: int  # bytes in the file
    live: int  # bytes of live extents in it


def usage(index: TenantIndex, sizes: dict[int, int]) -> list[SegmentUse]:
    """Each segment file's size and live bytes, by id."""
    return [SegmentUse(s, size, index.live_bytes.get(s, 0)) for s, size in sorted(sizes.items())]


def append_target(sizes: dict[int, int], policy: Policy, needed: int = 0) -> int:
    """The segment the next ``needed`` bytes go to: the newest while it has room (a fact
    larger than a segment gets a segment of its own), else a new one."""
    if not sizes:
        return 1
    last = max(sizes)
    size = sizes[last]
    if size == 0 or size + needed <= policy.segment_bytes:
        return last
    return last + 1


def droppable(segments: list[SegmentUse]) -> list[int]:
    """Segments with nothing live, except the newest (appends go there)."""
    if not segments:
        return []
    last = max(s.segment for s in segments)
    return [s.segment for s in segments if s.live == 0 and s.segment != last]


def to_compact(segments: list[SegmentUse], policy: Policy) -> list[int]:
    """Segments with live extents whose dead share is over the policy's threshold, most dead
    space first. The newest segment qualifies too (its live extents move to a fresh one)."""
    worth = [
        s
        for s in segments
        if s.live
        and s.size - s.live >= policy.min_dead_bytes
        and (s.size - s.live) > policy.dead_fraction * s.size
    ]
    return [s.segment for s in sorted(worth, key=lambda s: s.live - s.size)]


def compaction_target(sizes: dict[int, int], source: int, moving: int, policy: Policy) -> int:
    """Where a compaction of ``source`` appends its ``moving`` live bytes: never into the
    segment it empties."""
    target = append_target(sizes, policy, moving)
    return target if target != source else max(sizes) + 1


def index_needs_rewrite(index: TenantIndex, policy: Policy) -> bool:
    logged = index.entries_logged
    return logged >= policy.min_index_entries and logged > policy.index_slack * max(len(index), 1)
