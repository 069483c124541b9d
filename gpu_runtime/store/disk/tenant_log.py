"""One tenant directory of the packed store: append-only segments, an index log, a lock. Torch-free.

Readers take no lock: they follow the index log (``IndexFollower``) and read an extent with one
``pread``, checking its header, key and checksum; a location that went stale meanwhile (moved by
a compaction, zeroed by a delete) fails that check or is gone, and they look again. Writers
serialise on an exclusive ``flock`` of the directory's lock file (across processes: replicas on
a shared volume) and a mutex (across threads), and repair whatever a dead writer left before
they write: a torn index tail (the index is rebuilt from the segments), a torn segment tail
(cut off), segments with nothing live (dropped).

Ordering, so that a crash at any point leaves nothing wrong and nothing readable that should
not be: a put writes and syncs its extents, erases the extents it supersedes, then commits one
index record; a delete erases the extent (zeroes it, or drops or cuts the file where nothing
live remains: ``SegmentFiles.erase``), then commits its record (a crash between leaves an entry
whose bytes fail their checksum: never served); a compaction copies live extents, commits their
new places in one record, then drops the old segment. The segment files' side of all this is
``segment_files.py``; this module holds the lock, the index and the order.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpu_runtime.store.disk import compaction as plan
from gpu_runtime.store.disk.extent_index import INDEX_FILE, IndexFollower, TenantIndex
from gpu_runtime.store.disk.fileio import fsync_dir, new_index_header, replace_file, write_all
from gpu_runtime.store.disk.records import (
    CorruptRecordError,
    Delete,
    Extent,
    ExtentBody,
    Put,
    encode_record,
)
from gpu_runtime.store.disk.recovery import scan
from gpu_runtime.store.disk.segment_files import Held, Item, SegmentFiles

LOCK_FILE = ".lock"
_RECORD_BATCH = 1024  # entries per record when the index is rewritten


class TenantLog:
    def __init__(self, directory: Path, policy: plan.Policy) -> None:
        self.directory = directory
        self.policy = policy
        self.files = SegmentFiles(directory, policy)
        self._follower = IndexFollower(directory)
        self._state = threading.Lock()  # the follower, in this process
        self._writing = threading.Lock()  # writers in this process; flock across processes

    # ---- reading -------------------------------------------------------------------------
    def index(self) -> TenantIndex:
        with self._state:
            return self._follower.refresh()

    def lookup(self, key: bytes) -> Extent | None:
        return self.index().get(key)

    def read(self, key: bytes) -> ExtentBody | None:
        """The fact's extent, checked; ``None`` if it is not stored. An extent that fails its
        checks where the index still places it is discarded (zeroed, its entry deleted)."""
        for _ in range(3):
            extent = self.lookup(key)
            if extent is None:
                return None
            try:
                return self.files.read(key, extent)
            except FileNotFoundError:
                if self.lookup(key) == extent:
                    self.discard(key, extent)  # its segment is gone: the index lied
                    return None
            except CorruptRecordError:
                if self.lookup(key) == extent:  # not moved or deleted meanwhile: damaged
                    self.discard(key, extent)
                    return None
        return None  # moved three times while we looked: report it missing, not wrong

    # ---- writing -------------------------------------------------------------------------
    def append(self, items: list[Item]) -> list[Extent]:
        """Stores ``items`` (a later item of the same key wins); returns their extents."""
        latest = {item.key: item for item in items}
        with self._writer(create=True) as held:
            assert held is not None  # made if missing
            puts = self.files.write(held, list(latest.values()))
            superseded = [e for p in puts if (e := held.index.get(p.key)) is not None]
            self.files.erase(held, superseded, keep=[p.extent for p in puts])
            self._commit(held, puts)
            self._tidy(held)
        where = {p.key: p.extent for p in puts}
        return [where[item.key] for item in items]

    def delete(self, keys: list[bytes]) -> int:
        """Erases each stored key's extent (``SegmentFiles.erase``), then commits its deletion;
        how many were stored."""
        with self._writer(create=False) as held:
            if held is None:
                return 0
            doomed = {k: e for k in keys if (e := held.index.get(k)) is not None}
            if doomed:
                self.files.erase(held, list(doomed.values()))
                self._commit(held, [Delete(k) for k in doomed])
                self._tidy(held)
            return len(doomed)

    def discard(self, key: bytes, extent: Extent) -> None:
        """Deletes ``key`` if it is still at ``extent`` (found damaged there)."""
        with self._writer(create=False) as held:
            if held is not None and held.index.get(key) == extent:
                self.files.erase(held, [extent])
                self._commit(held, [Delete(key)])
                self._tidy(held)

    def compact(self) -> int:
        """Drops empty segments and moves the live extents out of mostly dead ones, one segment
        per hold of the lock (writers of the tenant wait for one segment's copy at most);
        returns the bytes given back to the filesystem."""
        given_back = 0
        for _ in range(len(self.segment_sizes()) + 1):  # each round drops a segment
            with self._writer(create=False) as held:
                if held is None:
                    break
                before = sum(held.sizes.values())
                todo = plan.to_compact(plan.usage(held.index, held.sizes), self.policy)
                if todo:
                    self._move_out(held, todo[0])
                self._tidy(held)
                given_back += before - sum(held.sizes.values())
            if not todo:
                break
        return given_back

    def compaction_due(self) -> bool:
        """A hint (no lock): whether ``compact`` would move anything now."""
        usage = plan.usage(self.index(), self.segment_sizes())
        return bool(plan.to_compact(usage, self.policy) or plan.droppable(usage))

    def recover(self) -> None:
        """Repairs whatever a writer that died left behind (see ``_repair``)."""
        with self._writer(create=False):
            pass

    def remove(self) -> None:
        """Drops every file of the tenant (nothing else shares them), then the directory."""
        with self._writer(create=False) as held:
            if held is None:
                return
            for name in os.listdir(self.directory):
                if name != LOCK_FILE:
                    (self.directory / name).unlink(missing_ok=True)
            (self.directory / LOCK_FILE).unlink(missing_ok=True)
            self.directory.rmdir()
            fsync_dir(self.directory.parent)

    def segment_sizes(self) -> dict[int, int]:
        return self.files.sizes()

    # ---- internals -----------------------------------------------------------------------
    @contextmanager
    def _writer(self, *, create: bool) -> Iterator[Held | None]:
        with self._writing:
            fd = self._lock(create)
            if fd is None:
                yield None
                return
            try:
                yield self._repair()
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _lock(self, create: bool) -> int | None:
        """Holds the tenant's lock file (made if ``create``); ``None`` if there is no tenant.
        Re-checked after locking: a tenant deleted meanwhile took its lock file with it."""
        path = self.directory / LOCK_FILE
        while True:
            if create:
                self.directory.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
            except FileNotFoundError:
                return None
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _repair(self) -> Held:
        """Under the lock nobody is writing: bytes after the last whole index record are torn
        (rebuild the index from the segments), bytes after the newest segment's last live
        extent are dead or torn (cut them off)."""
        sizes = self.files.sizes()
        index = self.index()
        state = self._follower.state
        if state.torn or (not state.exists and any(sizes.values())):
            index = self._rebuild(sizes)
        held = Held(index, sizes)
        self.files.cut_tail(held)
        return held

    def _rebuild(self, sizes: dict[int, int]) -> TenantIndex:
        rebuilt = scan(self.directory, sorted(sizes))
        held = Held(TenantIndex(), sizes)
        self.files.zero(
            [Extent(segment, offset, length, 0) for segment, offset, length in rebuilt.wipe]
        )
        for segment, size in rebuilt.cut.items():
            self.files.truncate(held, segment, size)
        self._write_index(rebuilt.puts)
        return self.index()

    def _write_index(self, puts: list[Put]) -> None:
        batches = range(0, len(puts), _RECORD_BATCH)
        records = [encode_record(puts[i : i + _RECORD_BATCH]) for i in batches]
        replace_file(self.directory / INDEX_FILE, [new_index_header(), *records])

    def _move_out(self, held: Held, segment: int) -> None:
        items, damaged = [], []
        for key, extent in held.index.in_segment(segment):
            try:
                body = self.files.read(key, extent)
            except (CorruptRecordError, FileNotFoundError):
                damaged.append(Delete(key))  # never served: deleted, dropped with its segment
                continue
            items.append(Item(key, body.meta, (body.payload,)))
        puts = self.files.write(held, items, avoid=segment)
        self._commit(held, puts)  # every moved extent's new place, in one record
        self._commit(held, damaged)
        self.files.drop(held, [segment])

    def _commit(self, held: Held, entries: list[Put] | list[Delete]) -> None:
        if not entries:
            return
        path = self.directory / INDEX_FILE
        if not self._follower.state.exists:
            replace_file(path, [new_index_header()])
            self.index()
        fd = os.open(path, os.O_WRONLY)
        try:  # at the end of the last whole record: ``_repair`` left nothing after it
            write_all(fd, [encode_record(entries)], self._follower.state.valid_end)
            os.fsync(fd)
        finally:
            os.close(fd)
        held.index = self.index()
        if plan.index_needs_rewrite(held.index, self.policy):
            self._write_index([Put(k, e) for k, e in held.index.items()])
            held.index = self.index()

    def _tidy(self, held: Held) -> None:
        """After a write: segments left with nothing live are dropped, a dead tail cut."""
        self.files.drop(held, plan.droppable(plan.usage(held.index, held.sizes)))
        self.files.cut_tail(held)


__all__ = ["LOCK_FILE", "Item", "TenantLog"]
