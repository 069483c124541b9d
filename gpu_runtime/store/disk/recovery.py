"""Rebuilding a tenant's index from its segments, when the index log is torn, damaged or lost.

Torch-free. Extents are self-describing (their key and checksum are in their header) and every
dead extent is zeroed when it dies, so the segments alone say what is stored: every whole,
checksum-valid extent, the latest copy of a key winning (compaction and rewrites only ever
append). Everything else found is wiped: older copies of a key (a compaction or a rewrite cut
short), torn or damaged bytes; a torn tail of the newest segment is cut off. Extents start at
multiples of ``ALIGN`` and zeroed space is skipped with one search, so a scan reads each
segment once.
"""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpu_runtime.store.disk.compaction import segment_name
from gpu_runtime.store.disk.records import (
    ALIGN,
    HEAD_BYTES,
    CorruptRecordError,
    Extent,
    Put,
    decode_extent,
    decode_extent_head,
)

_NONZERO = re.compile(rb"[^\x00]")


@dataclass
class Rebuilt:
    live: dict[bytes, Extent] = field(default_factory=dict)  # key -> its latest whole extent
    wipe: list[tuple[int, int, int]] = field(default_factory=list)  # (segment, offset, length)
    cut: dict[int, int] = field(default_factory=dict)  # segment -> size to truncate it to

    @property
    def puts(self) -> list[Put]:
        ordered = sorted(self.live.items(), key=lambda kv: (kv[1].segment, kv[1].offset))
        return [Put(key, extent) for key, extent in ordered]


def scan(directory: Path, segments: list[int]) -> Rebuilt:
    """What the segments (ids in ascending order) hold, and what must be wiped or cut."""
    rebuilt = Rebuilt()
    for segment in segments:
        path = directory / segment_name(segment)
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                continue
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                _scan_one(memoryview(data), segment, size, rebuilt)
    if segments:  # a torn tail of the newest segment is cut, not wiped
        newest = segments[-1]
        tail = [w for w in rebuilt.wipe if w[0] == newest]
        ends = [e.end for e in rebuilt.live.values() if e.segment == newest]
        end = max(ends, default=0)
        if tail and tail[-1][1] + tail[-1][2] > end:
            rebuilt.cut[newest] = end
            rebuilt.wipe = [w for w in rebuilt.wipe if w[0] != newest or w[1] < end]
    return rebuilt


def _scan_one(data: memoryview, segment: int, size: int, rebuilt: Rebuilt) -> None:
    at = 0
    try:
        while at < size:
            found = _NONZERO.search(data, at)
            if found is None:
                return
            at = found.start() - found.start() % ALIGN
            try:
                layout = decode_extent_head(data[at : at + HEAD_BYTES])
            except CorruptRecordError:
                _wipe(rebuilt, segment, at, min(ALIGN, size - at))
                at += ALIGN
                continue
            end = at + layout.length
            if end > size:  # cut short: the rest of the file is a torn write
                _wipe(rebuilt, segment, at, size - at)
                return
            try:
                key = decode_extent(data[at:end]).key  # no view into the mapping outlives this
            except CorruptRecordError:
                _wipe(rebuilt, segment, at, layout.length)
                at = end
                continue
            older = rebuilt.live.get(key)
            if older is not None:
                rebuilt.wipe.append((older.segment, older.offset, older.length))
            rebuilt.live[key] = Extent(segment, at, layout.length, layout.body_crc)
            at = end
    finally:
        data.release()


def _wipe(rebuilt: Rebuilt, segment: int, offset: int, length: int) -> None:
    last = rebuilt.wipe[-1] if rebuilt.wipe else None
    if last is not None and last[0] == segment and last[1] + last[2] == offset:
        rebuilt.wipe[-1] = (segment, last[1], last[2] + length)  # merge adjacent garbage
    else:
        rebuilt.wipe.append((segment, offset, length))
