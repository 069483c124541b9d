"""Which processes kept the host's CPUs busy during a benchmark cell, in cores.

At 100 users every part of a chat that runs on the host queued (run 9 on the H200), but not
which process was the bound: the API's workers, the runtime's, Postgres, or the benchmark's own
client (one Python process driving every user's OpenAI SDK stream, and the peer's Mem0 search).
``CpuMeter`` reads ``/proc`` before and after a cell: each process's user + system time, grouped
by the session it runs in (the device scripts start every service with ``setsid`` and write its
pid to ``<name>.pid``, so a service's children count as its own), and the host's busy time from
``/proc/stat``. Processes that start and end inside the cell are not seen (none do here).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

CLIENT = "bench client"


def sessions_of(pid_dir: Path | None) -> dict[int, str]:
    """Session id -> service name, from ``pid_dir``'s ``NAME.pid`` files (a daemon started with
    ``setsid`` leads its own session, whose id is its pid)."""
    if pid_dir is None or not pid_dir.is_dir():
        return {}
    found = {}
    for pidfile in pid_dir.glob("*.pid"):
        try:
            found[int(pidfile.read_text().split()[0])] = pidfile.stem
        except (ValueError, IndexError, OSError):
            continue
    return found


def _group(stat: ProcStat, pid: int, sessions: dict[int, str]) -> str:
    """A service by its session; else the bench's own process and the client processes it
    started (``clients.py``) are the client."""
    if pid != os.getpid() and stat.session in sessions:
        return sessions[stat.session]
    if os.getpid() in (pid, stat.parent):
        return CLIENT
    comm = stat.name
    if comm.startswith("postgres"):
        return "postgres"
    if comm.startswith("redis"):
        return "redis"
    return "other"


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says of one process."""

    name: str  # its comm (15 characters at most)
    session: int
    parent: int
    cpu_s: float  # user + system since it started


def proc_stat(pid: int | str) -> ProcStat | None:
    """``None`` when the process has ended (between listing and reading)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # after the name: state ppid pgrp session ...
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    return ProcStat(name, int(fields[3]), int(fields[1]), ticks / os.sysconf("SC_CLK_TCK"))


def cpu_by_process(sessions: dict[int, str]) -> dict[int, tuple[str, str, float]]:
    """pid -> (group, its name, CPU seconds: user + system since it started), for live ones."""
    found: dict[int, tuple[str, str, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := proc_stat(entry.name)) is not None:
            group = _group(stat, int(entry.name), sessions)
            found[int(entry.name)] = (group, stat.name, stat.cpu_s)
    return found


def host_busy_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole host since boot, summed over its cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    ticks = os.sysconf("SC_CLK_TCK")
    return (total - idle) / ticks, total / ticks


@dataclass
class CpuMeter:
    """``start()`` before a cell, ``stop()`` after it: cores each group kept busy meanwhile, and
    its busiest single process (a Python process near 1.0 is bound by its GIL)."""

    sessions: dict[int, str] = field(default_factory=dict)
    busiest: dict[str, float] = field(default_factory=dict)  # the last cell's, per group
    busiest_name: dict[str, str] = field(default_factory=dict)  # its name (/proc/PID/comm)
    _start: tuple[float, dict[int, tuple[str, str, float]], tuple[float, float]] | None = None

    def start(self) -> None:
        self._start = (time.perf_counter(), cpu_by_process(self.sessions), host_busy_seconds())

    def stop(self) -> dict[str, float]:
        """Cores busy on average over the cell, per group, plus ``host busy`` and ``host``
        (how many cores the host has); ``busiest`` then holds each group's busiest process."""
        assert self._start is not None, "start() first"
        wall0, before, (busy0, all0) = self._start
        after, (busy1, all1) = cpu_by_process(self.sessions), host_busy_seconds()
        wall = time.perf_counter() - wall0
        cores: dict[str, float] = {}
        self.busiest, self.busiest_name = {}, {}
        for pid, (group, name, seconds) in after.items():
            used = max(0.0, seconds - before.get(pid, (group, name, 0.0))[2]) / wall
            cores[group] = cores.get(group, 0.0) + used
            if used >= self.busiest.get(group, 0.0):
                self.busiest[group], self.busiest_name[group] = used, name
        cores = {name: round(value, 3) for name, value in sorted(cores.items())}
        self.busiest = {name: round(value, 3) for name, value in sorted(self.busiest.items())}
        host = float(os.cpu_count() or 0)
        # the share of every core's ticks that were busy (ticks, not wall time: never > host)
        cores["host busy"] = round(host * (busy1 - busy0) / max(all1 - all0, 1e-9), 3)
        cores["host"] = host
        return cores
