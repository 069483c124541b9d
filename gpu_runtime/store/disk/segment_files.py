"""The segment files of one tenant directory: appending extents, reading one back, and making
dead ones unreadable. Torch-free.

Everything but ``read`` runs under the tenant's writer lock (``TenantLog``), and is synced before
it returns: a caller commits an index record only after the bytes it refers to (or the erasure
it records) are durable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpu_runtime.store.disk import compaction as plan
from gpu_runtime.store.disk.extent_index import TenantIndex
from gpu_runtime.store.disk.fileio import fsync_dir, read_exact, write_all, zero_range
from gpu_runtime.store.disk.records import (
    CorruptRecordError,
    Extent,
    ExtentBody,
    Put,
    decode_extent,
    encode_extent_head,
)


@dataclass(frozen=True)
class Item:
    """One fact to append: its canonical key, opaque meta, and payload buffers (not copied)."""

    key: bytes
    meta: bytes
    payload: tuple[memoryview, ...]


@dataclass
class Held:
    """What a writer sees once it holds the lock: the index and each segment file's size."""

    index: TenantIndex
    sizes: dict[int, int]


class SegmentFiles:
    def __init__(self, directory: Path, policy: plan.Policy) -> None:
        self.directory = directory
        self.policy = policy

    def path(self, segment: int) -> Path:
        return self.directory / plan.segment_name(segment)

    def sizes(self) -> dict[int, int]:
        """Each segment file's size, by id (none if the directory is gone)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return {}
        sizes = {}
        for name in names:
            segment = plan.segment_id(name)
            if segment is not None:
                try:
                    sizes[segment] = os.stat(self.directory / name).st_size
                except FileNotFoundError:
                    continue  # dropped while we looked
        return sizes

    def read(self, key: bytes, extent: Extent) -> ExtentBody:
        """The extent, checked against its key and the crc the index recorded for it."""
        fd = os.open(self.path(extent.segment), os.O_RDONLY)
        try:
            data = read_exact(fd, extent.length, extent.offset)
        finally:
            os.close(fd)
        body = decode_extent(data, key)
        if body.crc != extent.crc:
            raise CorruptRecordError("extent is not the one the index recorded")
        return body

    def write(self, held: Held, items: list[Item], avoid: int | None = None) -> list[Put]:
        """Appends ``items`` to the newest segment (new ones as they fill up; never to
        ``avoid``, the segment a compaction empties) and syncs them."""
        puts: list[Put] = []
        files: dict[int, int] = {}
        created = False
        try:
            for item in items:
                head, pad, crc = encode_extent_head(item.key, item.meta, list(item.payload))
                length = len(head) + sum(p.nbytes for p in item.payload) + pad
                if avoid is None:
                    segment = plan.append_target(held.sizes, self.policy, length)
                else:
                    segment = plan.compaction_target(held.sizes, avoid, length, self.policy)
                if segment not in files:
                    created |= segment not in held.sizes
                    files[segment] = os.open(self.path(segment), os.O_WRONLY | os.O_CREAT, 0o600)
                offset = held.sizes.get(segment, 0)
                write_all(files[segment], [head, *item.payload, bytes(pad)], offset)
                held.sizes[segment] = offset + length
                puts.append(Put(item.key, Extent(segment, offset, length, crc)))
            for fd in files.values():
                os.fsync(fd)
        finally:
            for fd in files.values():
                os.close(fd)
        if created:
            fsync_dir(self.directory)
        return puts

    def erase(self, held: Held, dead: list[Extent], keep: list[Extent] | None = None) -> None:
        """Makes extents that are about to die unreadable, before their death is committed:
        a segment left with nothing live is dropped whole, a dead tail of the newest segment is
        cut off, anything else is overwritten with zeros in place; all of it synced. ``keep``:
        extents written but not committed yet (they count as live)."""
        by_segment: dict[int, list[Extent]] = {}
        for extent in dead:
            by_segment.setdefault(extent.segment, []).append(extent)
        newest = max(held.sizes, default=0)
        zero, dropped = [], []
        for segment, extents in by_segment.items():
            dying = set(extents)
            live = [*held.index.extents.values(), *(keep or [])]
            kept = [e for e in live if e.segment == segment and e not in dying]
            if not kept and segment != newest:
                dropped.append(segment)
                continue
            end = max((e.end for e in kept), default=0)
            if segment == newest and held.sizes.get(segment, 0) > end:
                self.truncate(held, segment, end)
                extents = [e for e in extents if e.offset < end]
            zero += extents
        self.drop(held, dropped)
        self.zero(zero)

    def cut_tail(self, held: Held) -> None:
        """Bytes after the newest segment's last live extent are dead (zeroed) or torn."""
        if held.sizes:
            newest = max(held.sizes)
            end = held.index.live_ends.get(newest, 0)
            if held.sizes[newest] > end:
                self.truncate(held, newest, end)

    def truncate(self, held: Held, segment: int, size: int) -> None:
        fd = os.open(self.path(segment), os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)  # a crash must not bring the cut bytes back
        finally:
            os.close(fd)
        held.sizes[segment] = size

    def zero(self, extents: list[Extent]) -> None:
        by_segment: dict[int, list[Extent]] = {}
        for extent in extents:
            by_segment.setdefault(extent.segment, []).append(extent)
        for segment, dead in by_segment.items():
            try:
                fd = os.open(self.path(segment), os.O_WRONLY)
            except FileNotFoundError:
                continue
            try:
                for extent in dead:
                    size = os.fstat(fd).st_size
                    zero_range(fd, extent.offset, max(0, min(extent.length, size - extent.offset)))
                os.fsync(fd)
            finally:
                os.close(fd)

    def drop(self, held: Held, segments: list[int]) -> None:
        for segment in segments:
            self.path(segment).unlink(missing_ok=True)
            held.sizes.pop(segment, None)
        if segments:
            fsync_dir(self.directory)
