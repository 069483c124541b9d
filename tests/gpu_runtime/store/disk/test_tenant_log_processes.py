"""The tenant log across real processes: concurrent writers (replicas on one volume) lose
nothing, and a writer killed with SIGKILL at arbitrary moments leaves, after recovery, exactly
this on disk: every indexed fact reads back exact, no other fact has a readable byte."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_runtime.store.disk.compaction import Policy
from gpu_runtime.store.disk.tenant_log import Item, TenantLog
from tests.gpu_runtime.store.disk.test_tenant_log import all_bytes, item, payload, read

pytestmark = pytest.mark.unit

POLICY = Policy(segment_bytes=32 << 10, dead_fraction=0.5, min_dead_bytes=4096)
REPO = Path(__file__).resolve().parents[4]


def aligned_chunks(directory: Path) -> set[bytes]:
    """Every 64-byte-aligned chunk of every file: a payload starts 64-aligned in its segment,
    so any surviving piece of one is among these."""
    return {raw[i : i + 64] for _, raw in all_bytes(directory) for i in range(0, len(raw), 64)}


def pieces(data: bytes) -> list[bytes]:
    return [data[i : i + 64] for i in range(0, len(data) - 63, 64)]


def _writer(directory: str, start: int, count: int, delete_every: int) -> None:
    log = TenantLog(Path(directory), POLICY)
    for n in range(start, start + count):
        log.append([item(n, 2000)])
        if n == start:
            print("stored", flush=True)  # the parent's kill lands after this writer stored one
        if delete_every and n % delete_every == 0:
            log.delete([f"key-{n - 1}".encode()])
        if n % 7 == 0:
            log.compact()


def writer_process(
    directory: Path, start: int, count: int, delete_every: int
) -> subprocess.Popen[str]:
    """A writer in a fresh interpreter, as another replica would be: neither a fork of the test
    process (it would inherit the session's Celery broker pool, whose after-fork hook blocked
    the child on the parent's socket) nor multiprocessing's spawn (which re-imports pytest's
    ``__main__``)."""
    code = (
        "from tests.gpu_runtime.store.disk.test_tenant_log_processes import _writer; "
        f"_writer({str(directory)!r}, {start}, {count}, {delete_every})"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True
    )


def wait_stored(proc: subprocess.Popen[str], timeout_s: float) -> bool:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return bool(ready) and proc.stdout.readline().strip() == "stored"


def test_concurrent_writers_in_two_processes_lose_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    procs = [writer_process(directory, base, 40, 0) for base in (0, 1000)]
    for proc in procs:
        proc.communicate(timeout=600)  # generous: every append is synced; a loaded machine is slow
        assert proc.returncode == 0
    log = TenantLog(directory, POLICY)
    for n in [*range(40), *range(1000, 1040)]:
        assert read(log, n) == payload(n, 2000), n


def test_sigkill_at_random_moments_leaves_only_whole_facts(tmp_path: Path) -> None:
    directory = tmp_path / "killed"
    rng = random.Random(7)
    written = 0
    for round_ in range(8):
        start = round_ * 1000
        proc = writer_process(directory, start, 500, 3)
        # A random moment of its work, once it has work behind it (on a loaded machine a fixed
        # delay can land before the process has written anything).
        assert wait_stored(proc, 120), "the writer never stored its first fact"
        time.sleep(rng.uniform(0.0, 0.35))
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        written = start + 500
    log = TenantLog(directory, POLICY)
    log.recover()
    stored = {int(k.decode().removeprefix("key-")) for k, _ in log.index().items()}
    assert stored, "the writers stored something before being killed"
    unreadable = [n for n in sorted(stored) if read(log, n) != payload(n, 2000)]
    # Only a delete killed after zeroing, before committing, leaves an entry whose bytes fail
    # their checks (read as missing, never as other bytes): at most one per kill, and only a
    # fact the writer was deleting (key n - 1 at every n divisible by 3).
    assert len(unreadable) <= 8 and all((n + 1) % 3 == 0 for n in unreadable), unreadable
    assert all(read(log, n) is None and log.lookup(f"key-{n}".encode()) is None for n in unreadable)
    stored -= set(unreadable)
    attempted = [n for start in range(0, written, 1000) for n in range(start, start + 500)]
    gone = [n for n in attempted if n not in stored]
    chunks = aligned_chunks(directory)
    readable = [n for n in gone if any(p in chunks for p in pieces(payload(n, 2000)))]
    assert readable == []
    assert any(p in chunks for p in pieces(payload(min(stored), 2000)))  # the probe works
    log.append([Item(b"after", b"{}", (memoryview(payload(1, 100)),))])  # writable again
    assert TenantLog(directory, POLICY).read(b"after") is not None
