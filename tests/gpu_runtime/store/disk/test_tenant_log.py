"""One tenant's segments and index, torch-free: crashes at every step of a write, corruption,
deletion that leaves no readable byte, compaction, and a restart that serves everything.

A crash is simulated by cutting a write short (the bytes a power loss leaves: a prefix) or by
stopping at a step, then opening the directory with a new ``TenantLog`` (a restarted process).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_runtime.store.disk import fileio, segment_files
from gpu_runtime.store.disk import tenant_log as module
from gpu_runtime.store.disk.compaction import Policy, segment_name
from gpu_runtime.store.disk.extent_index import INDEX_FILE
from gpu_runtime.store.disk.tenant_log import Item, TenantLog

pytestmark = pytest.mark.unit

POLICY = Policy(segment_bytes=16 << 10, dead_fraction=0.5, min_dead_bytes=1024)


class Crash(Exception):
    """The process died here."""


@functools.cache
def payload(n: int, size: int = 3000) -> bytes:
    """Random-looking bytes, distinct per fact (so a grep finds exactly one fact)."""
    blocks = (hashlib.sha256(f"{n}:{i}".encode()).digest() for i in range(size // 32 + 1))
    return b"".join(blocks)[:size]


def item(n: int, size: int = 3000) -> Item:
    return Item(f"key-{n}".encode(), f'{{"n":{n}}}'.encode(), (memoryview(payload(n, size)),))


def read(log: TenantLog, n: int) -> bytes | None:
    body = log.read(f"key-{n}".encode())
    return bytes(body.payload) if body is not None else None


def all_bytes(directory: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            yield path.name, path.read_bytes()


def find(directory: Path, data: bytes) -> list[str]:
    """Files holding any 64-byte piece of ``data``."""
    pieces = [data[i : i + 64] for i in range(0, len(data) - 64, 64)]
    return [name for name, raw in all_bytes(directory) if any(p in raw for p in pieces)]


@pytest.fixture
def log(tmp_path: Path) -> TenantLog:
    return TenantLog(tmp_path / "tenant", POLICY)


def test_restart_reads_every_fact_back_exactly(log: TenantLog) -> None:
    log.append([item(i) for i in range(5)])
    log.append([item(5)])
    restarted = TenantLog(log.directory, POLICY)
    restarted.recover()
    assert [read(restarted, i) for i in range(6)] == [payload(i) for i in range(6)]
    assert read(restarted, 99) is None


def test_batches_roll_over_into_new_segments(log: TenantLog) -> None:
    log.append([item(i) for i in range(12)])  # 12 x ~3 KiB over 16 KiB segments
    assert len(log.segment_sizes()) >= 2
    assert all(size <= POLICY.segment_bytes for size in log.segment_sizes().values())
    assert [read(log, i) for i in range(12)] == [payload(i) for i in range(12)]


def test_torn_extent_write_is_never_served_and_cut_off(
    log: TenantLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append([item(0)])
    real = fileio.write_all

    def torn(fd: int, parts: list[bytes | memoryview], offset: int) -> int:
        data = b"".join(bytes(p) for p in parts)
        real(fd, [data[: len(data) // 2]], offset)  # power lost halfway through
        raise Crash

    monkeypatch.setattr(segment_files, "write_all", torn)
    with pytest.raises(Crash):
        log.append([item(1)])
    monkeypatch.setattr(segment_files, "write_all", real)
    restarted = TenantLog(log.directory, POLICY)
    assert read(restarted, 1) is None and read(restarted, 0) == payload(0)
    restarted.recover()
    assert find(log.directory, payload(1)) == []  # the torn half was cut off
    restarted.append([item(2)])
    assert read(restarted, 2) == payload(2) and read(restarted, 0) == payload(0)


def test_torn_index_record_is_repaired_from_the_segments(
    log: TenantLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append([item(0), item(1)])
    real = fileio.write_all

    def torn_record(fd: int, parts: list[bytes | memoryview], offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(INDEX_FILE):
            data = b"".join(bytes(p) for p in parts)
            real(fd, [data[:7]], offset)  # the record's first bytes only
            raise Crash
        return real(fd, parts, offset)

    monkeypatch.setattr(module, "write_all", torn_record)
    with pytest.raises(Crash):
        log.append([item(2)])
    monkeypatch.setattr(module, "write_all", real)
    reader = TenantLog(log.directory, POLICY)  # a reader before any repair: the whole records
    assert read(reader, 2) is None and read(reader, 1) == payload(1)
    restarted = TenantLog(log.directory, POLICY)
    restarted.recover()  # rebuilt from the segments: fact 2's extent was whole and synced
    assert [read(restarted, i) for i in range(3)] == [payload(i) for i in range(3)]
    restarted.append([item(3)])
    assert read(TenantLog(log.directory, POLICY), 3) == payload(3)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_extent_is_discarded_never_served(log: TenantLog, damage: str) -> None:
    log.append([item(0), item(1), item(2)])
    extent = log.lookup(b"key-1")
    assert extent is not None
    path = log.directory / segment_name(extent.segment)
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[extent.offset + extent.length - 500] ^= 0x10
        path.write_bytes(bytes(raw))
    else:
        os.truncate(path, extent.offset + extent.length // 2)  # facts 1 and 2 cut
    other = TenantLog(log.directory, POLICY)  # another process reading the same files
    assert read(other, 1) is None
    assert log.lookup(b"key-1") is None  # discarded for everybody: it will be re-encoded
    assert find(log.directory, payload(1)) == []
    assert read(log, 0) == payload(0)
    assert read(log, 2) == (payload(2) if damage == "flip" else None)


def test_delete_leaves_no_readable_byte_in_any_file(log: TenantLog) -> None:
    log.append([item(i) for i in range(4)])
    assert find(log.directory, payload(2)) != []  # the probe finds what is there
    assert log.delete([b"key-2", b"key-404"]) == 1
    assert read(log, 2) is None and read(TenantLog(log.directory, POLICY), 2) is None
    assert find(log.directory, payload(2)) == []
    assert [read(log, i) for i in (0, 1, 3)] == [payload(i) for i in (0, 1, 3)]


def test_a_superseded_copy_is_zeroed_too(log: TenantLog) -> None:
    log.append([item(7)])
    old = payload(7)
    log.append([Item(b"key-7", b"{}", (memoryview(payload(8)),))])  # re-encoded: new bytes
    assert read(log, 7) == payload(8)
    assert find(log.directory, old) == []
    log.delete([b"key-7"])
    assert find(log.directory, payload(8)) == []


def test_crash_between_zeroing_and_committing_a_delete(
    log: TenantLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append([item(0), item(1)])

    def crash(*args: object) -> None:
        raise Crash

    monkeypatch.setattr(TenantLog, "_commit", crash)
    with pytest.raises(Crash):
        log.delete([b"key-0"])
    monkeypatch.undo()
    assert find(log.directory, payload(0)) == []  # zeroed before the crash
    restarted = TenantLog(log.directory, POLICY)
    assert read(restarted, 0) is None and restarted.lookup(b"key-0") is None
    assert read(restarted, 1) == payload(1)


def test_compaction_gives_space_back_and_keeps_every_live_fact(log: TenantLog) -> None:
    log.append([item(i) for i in range(15)])
    written = sum(log.segment_sizes().values())
    log.delete([f"key-{i}".encode() for i in range(15) if i % 4])  # 11 of 15 dead
    deleted = sum(log.segment_sizes().values())  # emptied segments are dropped at once
    assert log.compaction_due()
    given_back = log.compact()
    assert given_back > 0 and sum(log.segment_sizes().values()) == deleted - given_back
    assert sum(log.segment_sizes().values()) < written / 2
    live = [i for i in range(15) if i % 4 == 0]
    restarted = TenantLog(log.directory, POLICY)
    assert [read(restarted, i) for i in live] == [payload(i) for i in live]
    assert all(read(restarted, i) is None for i in range(15) if i % 4)
    assert not log.compaction_due()


def test_crash_after_compaction_committed_drops_the_old_segment_on_recovery(
    log: TenantLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append([item(i) for i in range(10)])
    log.delete([f"key-{i}".encode() for i in range(5)])  # segment 1 mostly dead

    def crash(*args: object) -> None:
        raise Crash

    monkeypatch.setattr(segment_files.SegmentFiles, "drop", crash)
    with pytest.raises(Crash):
        log.compact()
    monkeypatch.undo()
    restarted = TenantLog(log.directory, POLICY)
    restarted.recover()
    assert 1 not in restarted.segment_sizes()
    assert [read(restarted, i) for i in range(5, 10)] == [payload(i) for i in range(5, 10)]


def test_lost_index_is_rebuilt_from_the_segments(log: TenantLog) -> None:
    log.append([item(i) for i in range(6)])
    log.delete([b"key-3"])
    (log.directory / INDEX_FILE).unlink()
    restarted = TenantLog(log.directory, POLICY)
    restarted.recover()
    expected = [payload(i) if i != 3 else None for i in range(6)]
    assert [read(restarted, i) for i in range(6)] == expected


def test_remove_drops_every_file(log: TenantLog) -> None:
    log.append([item(0)])
    follower = TenantLog(log.directory, POLICY)
    assert read(follower, 0) == payload(0)
    log.remove()
    assert not log.directory.exists()
    assert read(follower, 0) is None  # another process's view: gone
    log.append([item(1)])  # the tenant starts over
    assert read(follower, 1) == payload(1) and read(follower, 0) is None


def test_many_index_entries_are_rewritten_compactly(tmp_path: Path) -> None:
    log = TenantLog(tmp_path / "t", Policy(min_index_entries=20, index_slack=2))
    for round_ in range(15):
        log.append([Item(b"same", b"{}", (memoryview(payload(round_, 200)),))])
    assert log.index().entries_logged < 20  # rewritten: only the live entry remains
    assert read_any(log, b"same") == payload(14, 200)


def read_any(log: TenantLog, key: bytes) -> bytes | None:
    body = log.read(key)
    return bytes(body.payload) if body is not None else None


def test_a_delete_drops_a_segment_it_empties_and_cuts_a_dead_tail(log: TenantLog) -> None:
    log.append([item(i) for i in range(12)])  # ~3 KiB each over 16 KiB segments
    first = log.lookup(b"key-0")
    assert first is not None
    in_first = [k for k, e in log.index().items() if e.segment == first.segment]
    newest = max(log.segment_sizes())
    log.delete(in_first)  # every fact of the first segment: the file goes, nothing is zeroed
    assert first.segment not in log.segment_sizes()
    tail, last = max(log.index().items(), key=lambda ke: (ke[1].segment, ke[1].offset))
    size = log.segment_sizes()[newest]
    log.delete([tail])  # the newest segment's last fact: its bytes are cut off
    assert log.segment_sizes()[newest] == size - last.length
    gone = [int(k.decode()[4:]) for k in [*in_first, tail]]
    assert all(find(log.directory, payload(i)) == [] for i in gone)
    kept = [i for i in range(12) if i not in gone]
    assert [read(TenantLog(log.directory, POLICY), i) for i in kept] == [payload(i) for i in kept]
