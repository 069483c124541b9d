"""Requests in flight by stage, and any stuck in one: shared by the API and the runtime
(torch-free).

Each process tracks its own requests: the stage each is in (a name the process chooses: the
API's admission, retrieval, first token, streaming; the runtime's preamble, fair gate, engine,
streaming), since when, and what runs it (the thread of a blocking stage, else the asyncio
task). A watcher on the event loop publishes the counts every second and logs, once per stage,
any request that has made no progress for ``stuck_after_s``, with where it waits: its thread's
stack, or its task's chain of awaits. In run 25 (docs/benchmarks.md) 43 chats of a 100-user
cell never got a first token while the engine held no request, and nothing said where they
had stopped.

Stages move from the loop or, for a blocking stage, from the thread that runs it: each move is
a few attribute writes (atomic under the GIL); the set of requests changes on the loop only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = "x-request-id"  # a request's id, answered and carried to the runtime
TRACKED = "inferscale_tracked"  # scope["state"] key: the request's ``Tracked``
WATCH_S = 1.0
DUMP_EVERY_S = 600.0  # every thread's and task's stack, at most this often (they are long)


@dataclass(eq=False)
class Tracked:
    """One request in flight."""

    request_id: str
    stage: str
    tenant: str | None = None
    began: float = field(default_factory=time.monotonic)
    since: float = 0.0  # time.monotonic() it entered its stage or last made progress
    thread: int | None = None  # the thread a blocking stage runs in (else ``task``'s)
    task: asyncio.Task[Any] | None = None
    reported: str | None = None  # the stage it was last reported stuck in
    # A streamed response's body (an async generator): a task awaiting its ``__anext__`` shows
    # no deeper frame, so ``where`` walks on from the generator itself.
    body: Any = None

    def __post_init__(self) -> None:
        self.since = self.since or self.began

    def touch(self) -> None:
        """Progress within its stage (a streamed token): not stuck."""
        self.since = time.monotonic()


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: a thread
        return None


class InFlight:
    def __init__(self, stuck_after_s: float = 30.0) -> None:
        self.stuck_after_s = stuck_after_s
        self._tracked: set[Tracked] = set()
        self.stuck_total: dict[str, int] = {}  # stage -> requests reported stuck there
        self.watch_failures = 0  # the watcher's rounds that raised (logged; it goes on)

    def begin(self, request_id: str, stage: str, tenant: str | None = None) -> Tracked:
        """On the event loop."""
        tracked = Tracked(request_id, stage, tenant, task=_current_task())
        self._tracked.add(tracked)
        return tracked

    @staticmethod
    def move(tracked: Tracked, stage: str, *, in_thread: bool = False) -> None:
        """``tracked`` enters ``stage``, run by the calling thread (``in_thread``) or task."""
        tracked.thread = threading.get_ident() if in_thread else None
        if not in_thread:
            tracked.task = _current_task() or tracked.task
        tracked.stage = stage
        tracked.touch()

    def end(self, tracked: Tracked) -> None:
        """On the event loop; ending twice is harmless."""
        self._tracked.discard(tracked)

    def __len__(self) -> int:
        return len(self._tracked)

    def snapshot(self, now: float | None = None) -> dict[str, dict[str, float]]:
        """Per stage: how many requests are in it and the longest any has been there (s)."""
        now = time.monotonic() if now is None else now
        out: dict[str, dict[str, float]] = {}
        for tracked in list(self._tracked):
            entry = out.setdefault(tracked.stage, {"count": 0, "oldest_s": 0.0})
            entry["count"] += 1
            entry["oldest_s"] = round(max(entry["oldest_s"], now - tracked.since), 3)
        return out

    def newly_stuck(self, now: float | None = None) -> list[Tracked]:
        """Requests without progress for ``stuck_after_s`` in a stage not reported yet."""
        now = time.monotonic() if now is None else now
        found = []
        for tracked in list(self._tracked):
            if now - tracked.since >= self.stuck_after_s and tracked.reported != tracked.stage:
                tracked.reported = tracked.stage
                self.stuck_total[tracked.stage] = self.stuck_total.get(tracked.stage, 0) + 1
                found.append(tracked)
        return found


def _frame_lines(frames: list[FrameType]) -> list[str]:
    return [f'  File "{f.f_code.co_filename}", line {f.f_lineno}, in {f.f_code.co_name}'
            for f in frames]  # fmt: skip


def _first_set(obj: Any, names: tuple[str, ...]) -> Any:
    """The first of ``obj``'s attributes ``names`` that is set (coroutine, async generator and
    generator name theirs apart), or None."""
    return next((getattr(obj, n) for n in names if getattr(obj, n, None) is not None), None)


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """Where a task waits: its coroutine, what that awaits, and so on down to the future
    (``Task.get_stack`` gives the outermost frame only)."""
    return _chain(task.get_coro())


def _chain(awaited: Any) -> list[str]:
    """The frames from a coroutine, async generator or generator down what each awaits."""
    frames: list[FrameType] = []
    for _ in range(200):  # a chain is never this deep; guards a cycle
        frame = _first_set(awaited, ("cr_frame", "ag_frame", "gi_frame"))
        if frame is None:
            break
        frames.append(frame)
        awaited = _first_set(awaited, ("cr_await", "ag_await", "gi_yieldfrom"))
        if awaited is None:
            break
    return _frame_lines(frames)


def where(tracked: Tracked) -> str:
    """The stack a request waits in: its thread's, else its task's chain of awaits."""
    if tracked.thread is not None:
        frame = sys._current_frames().get(tracked.thread)
        if frame is not None:
            return "".join(traceback.format_stack(frame)).rstrip()
        return "  (its thread has moved on)"
    if tracked.task is not None and not tracked.task.done():
        lines = await_chain(tracked.task)
        if tracked.body is not None:  # the chain breaks at the body's __anext__: go on from it
            lines += ["  (the response's body:)", *_chain(tracked.body)]
        return "\n".join(lines) or "  (no frame)"
    return "  (no thread or task recorded)"


def all_stacks() -> str:
    """Every thread's stack and every asyncio task's chain of awaits in this process."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame)).rstrip()
        parts.append(f"thread {names.get(ident, ident)}:\n{stack}")
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        tasks = set()
    for task in tasks:
        parts.append(f"task {task.get_name()}:\n" + "\n".join(await_chain(task)))
    return "\n".join(parts)


async def watch(
    inflight: InFlight,
    logger: logging.Logger,
    publish: Callable[[dict[str, dict[str, float]]], None] | None = None,
    on_stuck: Callable[[Tracked], None] | None = None,
    interval_s: float = WATCH_S,
    on_failure: Callable[[], None] | None = None,
) -> None:
    """Runs for the process's life: the counts to ``publish`` each ``interval_s``, and every
    newly stuck request logged with where it waits (every stack too, at most each 10 min).
    A round that fails is logged, counted (``on_failure``) and the watcher goes on: a task
    that died would leave the published counts frozen and report nothing stuck, silently
    (nobody awaits it)."""
    dumped = -DUMP_EVERY_S
    while True:
        await asyncio.sleep(interval_s)
        try:
            if _watch_round(inflight, logger, publish, on_stuck, dumped):
                dumped = time.monotonic()
        except Exception:
            inflight.watch_failures += 1
            logger.exception("the in-flight watcher's round failed (it goes on)")
            if on_failure is not None:  # counted where an operator sees it (/metrics)
                try:
                    on_failure()
                except Exception:
                    logger.exception("counting the watcher's failure failed")


def _watch_round(
    inflight: InFlight,
    logger: logging.Logger,
    publish: Callable[[dict[str, dict[str, float]]], None] | None,
    on_stuck: Callable[[Tracked], None] | None,
    dumped: float,
) -> bool:
    """One round of ``watch``; True when it dumped every stack."""
    now = time.monotonic()
    if publish is not None:
        publish(inflight.snapshot(now))
    stuck = inflight.newly_stuck(now)
    for tracked in stuck:
        if on_stuck is not None:
            on_stuck(tracked)
        logger.warning(
            "request %s (tenant %s) stuck in %s for %.0f s, %.0f s after it arrived; it "
            "waits in:\n%s",
            tracked.request_id, tracked.tenant, tracked.stage, now - tracked.since,
            now - tracked.began, where(tracked),
        )  # fmt: skip
    if stuck and now - dumped >= DUMP_EVERY_S:
        logger.warning("every stack of this process (pid %s):\n%s", os.getpid(), all_stacks())
        return True
    return False


def tracked_of(scope: Scope) -> Tracked | None:
    """The request's ``Tracked`` (``TrackRequests`` puts it in the ASGI scope's state)."""
    found: Tracked | None = scope.get("state", {}).get(TRACKED)
    return found


def _request_id(scope: Scope) -> str:
    """The caller's ``x-request-id`` where it sent a sane one (the API's id of a chat reaches
    the runtime that way), else a new one."""
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER.encode():
            text = str(value.decode("latin-1"))
            if 0 < len(text) <= 128 and text.isprintable():
                return text
    return uuid.uuid4().hex


class TrackRequests:
    """Plain ASGI middleware: every HTTP request in ``inflight`` (stage "received" until a
    route moves it on) from its arrival to its response's end, its id answered in
    ``x-request-id``."""

    def __init__(self, app: ASGIApp, inflight: InFlight) -> None:
        self.app = app
        self.inflight = inflight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tracked = self.inflight.begin(_request_id(scope), "received")
        scope.setdefault("state", {})[TRACKED] = tracked
        header = (REQUEST_ID_HEADER.encode(), tracked.request_id.encode())

        async def identified(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        try:
            await self.app(scope, receive, identified)
        finally:
            self.inflight.end(tracked)
