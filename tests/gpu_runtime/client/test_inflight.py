"""Requests in flight by stage: counts, stuck requests reported once per stage with where they
wait (a real thread's stack, a real task's chain of awaits), and the ASGI middleware's ids."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gpu_runtime.client.inflight import (
    REQUEST_ID_HEADER,
    InFlight,
    TrackRequests,
    tracked_of,
    watch,
    where,
)

pytestmark = pytest.mark.unit


def test_counts_by_stage_and_the_oldest_in_each() -> None:
    inflight = InFlight()
    a = inflight.begin("a", "retrieval")
    b = inflight.begin("b", "retrieval")
    c = inflight.begin("c", "streaming")
    a.since -= 5.0
    snapshot = inflight.snapshot()
    assert snapshot["retrieval"]["count"] == 2 and snapshot["streaming"]["count"] == 1
    assert 5.0 <= snapshot["retrieval"]["oldest_s"] < 6.0
    assert snapshot["streaming"]["oldest_s"] < 1.0
    inflight.end(b)
    inflight.end(c)
    inflight.end(c)  # twice: harmless
    assert inflight.snapshot() == {"retrieval": {"count": 1, "oldest_s": pytest.approx(5, 0.2)}}


def test_a_stuck_request_is_reported_once_per_stage_and_progress_resets_it() -> None:
    inflight = InFlight(stuck_after_s=10.0)
    slow = inflight.begin("slow", "first_token")
    moving = inflight.begin("moving", "streaming")
    slow.since -= 9.0
    moving.since -= 9.0
    assert inflight.newly_stuck() == []
    slow.since -= 2.0
    moving.touch()  # a token: progress
    assert inflight.newly_stuck() == [slow]
    slow.since -= 60.0
    assert inflight.newly_stuck() == []  # reported once in that stage
    InFlight.move(slow, "streaming")  # a new stage: its clock starts again
    assert inflight.newly_stuck() == []
    slow.since -= 11.0
    moving.since -= 11.0
    assert {t.request_id for t in inflight.newly_stuck()} == {"slow", "moving"}
    assert inflight.stuck_total == {"first_token": 1, "streaming": 2}


def _held_in_a_blocking_call(inflight: InFlight, tracked_box: list[object], go: threading.Event,
                             entered: threading.Event) -> None:  # fmt: skip
    InFlight.move(tracked_box[0], "retrieval", in_thread=True)  # type: ignore[arg-type]
    entered.set()
    go.wait(10)


def test_where_shows_the_stack_of_the_thread_a_blocking_stage_runs_in() -> None:
    inflight = InFlight()
    tracked = inflight.begin("t", "received")
    go, entered = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=_held_in_a_blocking_call, args=(inflight, [tracked], go, entered)
    )
    thread.start()
    try:
        assert entered.wait(5)
        stack = where(tracked)
        assert "_held_in_a_blocking_call" in stack and "go.wait(10)" in stack
    finally:
        go.set()
        thread.join()
    assert where(tracked) == "  (its thread has moved on)"


async def _inner_wait(never: asyncio.Event) -> None:
    await never.wait()


async def _outer_chat(inflight: InFlight, never: asyncio.Event) -> None:
    tracked = inflight.begin("chat-1", "first_token", tenant="acme")
    try:
        await _inner_wait(never)
    finally:
        inflight.end(tracked)


def test_a_stuck_task_is_logged_with_its_chain_of_awaits(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.inflight")
    published: list[dict[str, dict[str, float]]] = []
    reported: list[str] = []

    async def scenario() -> None:
        inflight = InFlight(stuck_after_s=0.05)
        never = asyncio.Event()
        chat = asyncio.create_task(_outer_chat(inflight, never))
        watcher = asyncio.create_task(
            watch(inflight, logger, published.append, lambda t: reported.append(t.request_id),
                  interval_s=0.02)
        )  # fmt: skip
        await asyncio.sleep(0.2)
        chat.cancel()
        watcher.cancel()
        await asyncio.gather(chat, watcher, return_exceptions=True)
        assert len(inflight) == 0

    with caplog.at_level(logging.WARNING, logger="test.inflight"):
        asyncio.run(scenario())
    assert reported == ["chat-1"]  # once, though the watcher looked ten times
    assert any(s.get("first_token", {}).get("count") == 1 for s in published)
    stuck = [r.getMessage() for r in caplog.records if "stuck in first_token" in r.getMessage()]
    assert len(stuck) == 1
    assert "chat-1 (tenant acme)" in stuck[0]
    assert "_outer_chat" in stuck[0] and "_inner_wait" in stuck[0]  # down the chain
    dumps = [r.getMessage() for r in caplog.records if "every stack" in r.getMessage()]
    assert len(dumps) == 1 and "_inner_wait" in dumps[0]


async def _body(never: asyncio.Event) -> AsyncIterator[str]:
    yield "first"
    await _inner_wait(never)
    yield "never"


async def _stream_response(body: AsyncIterator[str]) -> None:
    async for _ in body:  # as Starlette's StreamingResponse consumes a body
        pass


def test_where_walks_on_into_a_streamed_body() -> None:
    """A task awaiting an async generator's ``__anext__`` shows no deeper frame; the body
    recorded on the request takes the chain on to where the stream waits."""

    async def scenario() -> tuple[str, str]:
        inflight = InFlight()
        never = asyncio.Event()
        body = _body(never)
        streaming = asyncio.create_task(_stream_response(body))
        tracked = inflight.begin("chat-2", "streaming")
        tracked.task = streaming
        await asyncio.sleep(0.05)
        without = where(tracked)
        tracked.body = body
        with_body = where(tracked)
        streaming.cancel()
        await asyncio.gather(streaming, return_exceptions=True)
        return without, with_body

    without, with_body = asyncio.run(scenario())
    assert "_stream_response" in without and "_inner_wait" not in without
    assert "_stream_response" in with_body
    assert "_body" in with_body and "_inner_wait" in with_body


def test_a_failing_round_is_logged_and_the_watcher_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A watcher task that died would freeze the published counts and report nothing stuck,
    with nobody to notice (nothing awaits it)."""
    logger = logging.getLogger("test.inflight")
    published: list[dict[str, dict[str, float]]] = []
    reported: list[str] = []
    counted: list[int] = []

    def flaky(snapshot: dict[str, dict[str, float]]) -> None:
        published.append(snapshot)
        if len(published) == 1:
            raise OSError("the metrics file went away")

    async def scenario() -> InFlight:
        inflight = InFlight(stuck_after_s=0.05)
        never = asyncio.Event()
        chat = asyncio.create_task(_outer_chat(inflight, never))
        watcher = asyncio.create_task(
            watch(inflight, logger, flaky, lambda t: reported.append(t.request_id),
                  interval_s=0.02, on_failure=lambda: counted.append(1))
        )  # fmt: skip
        await asyncio.sleep(0.2)
        assert not watcher.done()
        chat.cancel()
        watcher.cancel()
        await asyncio.gather(chat, watcher, return_exceptions=True)
        return inflight

    with caplog.at_level(logging.WARNING, logger="test.inflight"):
        inflight = asyncio.run(scenario())
    assert inflight.watch_failures == 1 and counted == [1]  # counted for /metrics too
    assert len(published) > 3  # it went on publishing
    assert reported == ["chat-1"]  # and reporting
    failed = [r for r in caplog.records if "round failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None


def _app(inflight: InFlight, seen: list[dict[str, dict[str, float]]]) -> TrackRequests:
    async def endpoint(request: Request) -> JSONResponse:
        tracked = tracked_of(request.scope)
        assert tracked is not None
        InFlight.move(tracked, "working")
        seen.append(inflight.snapshot())
        return JSONResponse({"id": tracked.request_id})

    return TrackRequests(Starlette(routes=[Route("/x", endpoint)]), inflight)


def test_the_middleware_tracks_each_request_under_the_callers_id_or_a_new_one() -> None:
    inflight = InFlight()
    seen: list[dict[str, dict[str, float]]] = []

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=_app(inflight, seen))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            given = await client.get("/x", headers={REQUEST_ID_HEADER: "chat-42"})
            fresh = await client.get("/x")
            odd = await client.get("/x", headers={REQUEST_ID_HEADER: "x" * 500})
        return given, fresh, odd

    given, fresh, odd = asyncio.run(scenario())
    assert given.headers[REQUEST_ID_HEADER] == "chat-42" == given.json()["id"]
    assert len(fresh.headers[REQUEST_ID_HEADER]) == 32  # a new uuid
    assert odd.headers[REQUEST_ID_HEADER] != "x" * 500  # not echoed: a new one
    assert seen[0] == {"working": {"count": 1, "oldest_s": pytest.approx(0, abs=0.5)}}
    assert len(inflight) == 0  # every request ended
