"""The API-CPU bench's reading of /proc: a process tree's CPU, children included (the API's
workers); the runtime server's process alone (not its engine core)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.serve.api_cpu import cpu_seconds, runtime_cpu_seconds


def test_cpu_seconds_counts_this_process_burning_cpu() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.2


@contextmanager
def burning_child() -> Iterator[None]:
    """A child that burns ~0.5 s of CPU, then sleeps so it is still alive when it is read."""
    child = subprocess.Popen([sys.executable, "-c", (
        "import time\nend = time.process_time() + 0.5\n"
        "while time.process_time() < end: pass\ntime.sleep(30)"
    )])  # fmt: skip
    try:
        yield
    finally:
        child.kill()
        child.wait()


def _wait_for_the_childs_cpu(since: float) -> None:
    deadline = time.monotonic() + 20
    while cpu_seconds(os.getpid()) - since < 0.4 and time.monotonic() < deadline:
        time.sleep(0.1)


def test_cpu_seconds_includes_a_live_child() -> None:
    with burning_child():
        mine = time.process_time()
        _wait_for_the_childs_cpu(mine)
        assert cpu_seconds(os.getpid()) - mine >= 0.4  # the child's CPU, not ours


def test_the_runtimes_cpu_leaves_its_children_out() -> None:
    with burning_child():
        tree, alone = cpu_seconds(os.getpid()), runtime_cpu_seconds(os.getpid())
        _wait_for_the_childs_cpu(tree)
        assert cpu_seconds(os.getpid()) - tree >= 0.4  # the child burned...
        assert runtime_cpu_seconds(os.getpid()) - alone < 0.2  # ...but not in this process
