"""Small durable-file helpers for the packed store (torch-free): whole writes, zeroing, fsyncs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from gpu_runtime.store.disk.records import INDEX_HEADER_BYTES, INDEX_MAGIC, CorruptRecordError

_ZEROS = bytes(1 << 20)
Buffer = bytes | bytearray | memoryview


def write_all(fd: int, parts: Sequence[Buffer], offset: int) -> int:
    """Writes ``parts`` back to back at ``offset`` (retrying short writes); bytes written."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    total = sum(v.nbytes for v in views)
    done = 0
    while views:
        wrote = os.pwritev(fd, views, offset + done)
        done += wrote
        while views and wrote >= views[0].nbytes:
            wrote -= views[0].nbytes
            views.pop(0)
        if views and wrote:
            views[0] = views[0][wrote:]
    return total


def read_exact(fd: int, length: int, offset: int) -> bytearray:
    """``length`` bytes at ``offset`` into a fresh writable buffer (raises if the file is
    shorter: a truncated segment)."""
    buffer = bytearray(length)
    view = memoryview(buffer)
    done = 0
    while done < length:
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise CorruptRecordError(f"file ends {length - done} bytes early")
        done += got
    return buffer


def zero_range(fd: int, offset: int, length: int) -> None:
    """Overwrites ``length`` bytes at ``offset`` with zeros, in place (not synced)."""
    end = offset + length
    while offset < end:
        chunk = min(len(_ZEROS), end - offset)
        write_all(fd, [memoryview(_ZEROS)[:chunk]], offset)
        offset += chunk


def fsync_dir(directory: Path) -> None:
    """Makes a file's creation, rename or removal in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_index_header() -> bytes:
    return INDEX_MAGIC + os.urandom(INDEX_HEADER_BYTES - len(INDEX_MAGIC))


def replace_file(path: Path, parts: Sequence[Buffer]) -> None:
    """Writes a whole file beside ``path``, syncs it and renames it over ``path``: readers see
    the old file or the complete new one, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, parts, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
