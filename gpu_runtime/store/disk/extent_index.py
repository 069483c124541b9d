"""A tenant's index of stored facts, replayed from its index log. Torch-free.

``TenantIndex`` is the state: which extent holds each key, and how many live bytes each segment
holds (compaction's input). ``IndexFollower`` keeps one in step with the log file on disk,
reading only what was appended since it last looked (one ``stat`` when nothing changed), and
starting over when the file was replaced (rewritten by compaction, or the tenant deleted and
written again). Any process may follow a log: the worker that writes it, the engine core's
catalog and the runtime server, which only ask whether a fact is stored.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gpu_runtime.store.disk.records import (
    INDEX_HEADER_BYTES,
    INDEX_MAGIC,
    CorruptRecordError,
    Delete,
    Entry,
    Extent,
    Put,
    decode_records,
)

INDEX_FILE = "index"


@dataclass
class TenantIndex:
    extents: dict[bytes, Extent] = field(default_factory=dict)  # canonical key -> extent
    live_bytes: dict[int, int] = field(default_factory=dict)  # segment -> bytes of live extents
    live_ends: dict[int, int] = field(default_factory=dict)  # segment -> end of its last live
    entries_logged: int = 0  # entries in the log (puts and deletes): its rewrite is due when
    # this is much larger than the live count

    def __len__(self) -> int:
        return len(self.extents)

    def get(self, key: bytes) -> Extent | None:
        return self.extents.get(key)

    def items(self) -> Iterator[tuple[bytes, Extent]]:
        return iter(list(self.extents.items()))

    def in_segment(self, segment: int) -> list[tuple[bytes, Extent]]:
        return sorted(
            ((k, e) for k, e in self.extents.items() if e.segment == segment),
            key=lambda item: item[1].offset,
        )

    def apply(self, entry: Entry) -> Extent | None:
        """Applies one entry; returns the extent it made dead (superseded or deleted)."""
        self.entries_logged += 1
        old = self.extents.pop(entry.key, None)
        if old is not None:
            self._account(old, -1)
        if isinstance(entry, Put):
            self.extents[entry.key] = entry.extent
            self._account(entry.extent, +1)
        return old

    def _account(self, extent: Extent, sign: int) -> None:
        segment = extent.segment
        live = self.live_bytes.get(segment, 0) + sign * extent.length
        if live:
            self.live_bytes[segment] = live
        else:
            self.live_bytes.pop(segment, None)
        if sign > 0:
            self.live_ends[segment] = max(self.live_ends.get(segment, 0), extent.end)
        elif extent.end >= self.live_ends.get(segment, 0):  # its last live extent left: rescan
            ends = [e.end for e in self.extents.values() if e.segment == segment]
            if ends:
                self.live_ends[segment] = max(ends)
            else:
                self.live_ends.pop(segment, None)


@dataclass(frozen=True)
class LogState:
    """How the follower's view relates to the file: for a writer deciding on repairs."""

    exists: bool
    size: int  # bytes in the file when last read
    valid_end: int  # end of the last whole record
    damaged: bool  # bytes after ``valid_end`` that are not a record in progress

    @property
    def torn(self) -> bool:
        """Bytes after the last whole record (under the writer lock: a torn or damaged tail)."""
        return self.exists and self.valid_end != self.size


class IndexFollower:
    """One tenant's ``TenantIndex``, kept in step with its log file (not thread-safe: callers
    hold their own lock)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / INDEX_FILE
        self.index = TenantIndex()
        self._file: tuple[int, bytes] | None = None  # (inode, generation) of the file read
        self._offset = 0
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime) when last read
        self.state = LogState(False, 0, 0, False)

    def refresh(self) -> TenantIndex:
        """Reads what was appended since the last call; starts over if the file was replaced,
        and forgets everything if it is gone (the tenant deleted)."""
        try:
            # One system call when nothing changed (the common case: every claim asks). Each
            # call releases the GIL, and in the engine core another thread may keep it a while.
            info = os.stat(self.path)
            if (info.st_ino, info.st_size, info.st_mtime_ns) == self._seen:
                return self.index
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._gone()
            return self.index
        try:
            info = os.fstat(fd)  # the file as read from here on (it may have changed since)
            seen, size = (info.st_ino, info.st_size, info.st_mtime_ns), info.st_size
            self._seen = seen
            head = os.pread(fd, INDEX_HEADER_BYTES, 0)
            if len(head) < INDEX_HEADER_BYTES or head[: len(INDEX_MAGIC)] != INDEX_MAGIC:
                self._reset(None)  # being created, or not an index: nothing committed in it
                self.state = LogState(True, size, 0, len(head) == INDEX_HEADER_BYTES)
                return self.index
            identity = (info.st_ino, head[len(INDEX_MAGIC) :])
            if identity != self._file or size < self._offset:
                self._reset(identity)
            self._read(fd, size)
        finally:
            os.close(fd)
        return self.index

    def _gone(self) -> None:
        self._reset(None)
        self._seen = None
        self.state = LogState(False, 0, 0, False)

    def _reset(self, identity: tuple[int, bytes] | None) -> None:
        self.index = TenantIndex()
        self._file = identity
        self._offset = INDEX_HEADER_BYTES

    def _read(self, fd: int, size: int) -> None:
        start = self._offset
        data = os.pread(fd, size - start, start) if size > start else b""
        entries, end, damaged = decode_records(data)
        for entry in entries:
            self.index.apply(entry)
        self._offset = start + end
        self.state = LogState(True, size, self._offset, damaged)


def read_index(directory: Path) -> TenantIndex:
    """A tenant's index as its log says now (a one-off read)."""
    return IndexFollower(directory).refresh()


__all__ = [
    "INDEX_FILE",
    "CorruptRecordError",
    "Delete",
    "IndexFollower",
    "LogState",
    "Put",
    "TenantIndex",
    "read_index",
]
