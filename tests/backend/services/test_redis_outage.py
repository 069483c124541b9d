"""Redis hung or gone, as the API meets it: the first call waits for its timeout and opens the
process's Redis breaker; after that the rate limits let requests in, API keys bypass their cache
and a job's send fails over to the outbox, all without touching Redis again, until a probe finds
it answering. The Redis here is a real TCP server that accepts connections and never answers
(counting them), then answers PING when told to; what it stands in for is an external server."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from backend.core.breaker import BreakerState, CircuitBreaker, DependencyDown, redis_breaker
from backend.core.config import get_settings
from backend.errors import UnavailableError
from backend.jobs.pipeline.broker import send_to_broker, sender
from backend.jobs.pipeline.tasks import TaskName, queue_for
from backend.services.credentials import CredentialCache
from backend.services.rate_limits import Admission, RateLimiter, TenantLimits
from gpu_runtime.types import TenantId
from tests.redis_dbs import spare_redis_url
from tests.support import breaker_state as state


class SilentRedis:
    """Accepts and holds every connection; answers nothing until ``answer_pings`` (then +PONG
    to a PING and +OK to anything else, which is all a probe needs)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.answer_pings = False
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                if self.answer_pings:
                    conn.sendall(b"".join(_replies(data)))

    def close(self) -> None:
        self.listener.close()
        for conn in self._held:
            conn.close()


# RESP3 (redis-py's default: HELLO 3 on connecting, then CLIENT commands, answered +OK)
REPLIES = {b"HELLO": b"%1\r\n+proto\r\n:3\r\n", b"PING": b"+PONG\r\n"}


def _replies(data: bytes) -> list[bytes]:
    """A reply to each command in ``data`` (RESP arrays of bulk strings, each whole in one
    read: what redis-py sends on connecting and for a PING)."""
    lines, replies, i = data.split(b"\r\n"), [], 0
    while i < len(lines) and lines[i].startswith(b"*"):
        count = int(lines[i][1:])
        name = lines[i + 2].upper()  # the first bulk string: "$len", then the command's name
        replies.append(REPLIES.get(name, b"+OK\r\n"))
        i += 1 + 2 * count
    return replies


@contextmanager
def redis_at(monkeypatch: pytest.MonkeyPatch, url: str, **env: str) -> Iterator[None]:
    """This process's settings, Redis breaker and Celery sender point at ``url`` (and ``env``)
    inside the block, and back at the session's after it."""
    monkeypatch.setenv("REDIS_URL", url)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    caches = (get_settings, sender, redis_breaker)
    for cached in caches:
        cached.cache_clear()
    try:
        yield
    finally:
        monkeypatch.undo()
        for cached in caches:
            cached.cache_clear()


@pytest.fixture
def silent_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[SilentRedis]:
    """Pointed at a silent Redis; the probe runs only when the test calls it (the background
    prober waits a minute)."""
    server = SilentRedis()
    url = f"redis://127.0.0.1:{server.port}/0"
    try:
        with redis_at(monkeypatch, url, INFERSCALE_REDIS_RETRY_AFTER_S="60"):
            yield server
    finally:
        server.close()


def test_one_timeout_then_every_redis_path_falls_back_without_touching_redis(
    silent_redis: SilentRedis,
) -> None:
    settings = get_settings()
    breaker = redis_breaker(settings.redis_url, settings.redis_retry_after_s)
    limiter = RateLimiter(settings.redis_url, settings.rate_limit_window_s, breaker)
    cache = CredentialCache(limiter.redis, breaker, 10, 60)
    tenant = TenantId(str(uuid.uuid4()))
    one_at_a_time = TenantLimits(requests_per_window=1, tokens_per_window=0, concurrent=1)

    first = limiter.admit(tenant, one_at_a_time)  # waits for the socket timeout, then lets in
    assert first.limiter is None  # not counted: nothing to release
    assert state(breaker) is BreakerState.OPEN and silent_redis.accepted == 1

    # Counted, the second request would be refused (one a window, one in flight): let in.
    admitted = [limiter.admit(tenant, one_at_a_time) for _ in range(5)]
    assert all(a.limiter is None for a in admitted)
    assert cache.generation() is None  # keys are read from Postgres
    with pytest.raises(DependencyDown):
        send_to_broker(TaskName.RELAY_OUTBOX, {})  # the outbox keeps the job
    with pytest.raises(UnavailableError):  # an operator's view: a 503, not a 500
        limiter.usage(tenant)
    assert silent_redis.accepted == 1  # none of it went near Redis
    assert breaker.opened == 1

    assert not breaker.probe_once()  # still silent
    silent_redis.answer_pings = True
    assert breaker.probe_once()
    assert state(breaker) is BreakerState.CLOSED
    accepted = silent_redis.accepted
    Admission(limiter, tenant, "member", 0).record_tokens(5)  # guarded: goes to Redis again
    assert silent_redis.accepted == accepted + 1


@pytest.mark.db  # the session's real Redis
def test_a_connection_closed_by_a_restarted_redis_is_replaced_without_opening_the_breaker(
    redis_clean: None,
) -> None:
    url = os.environ["REDIS_URL"]
    breaker = CircuitBreaker("Redis", 60, lambda: None)
    limiter = RateLimiter(url, 60, breaker)
    tenant = TenantId(str(uuid.uuid4()))
    limits = TenantLimits(requests_per_window=10, tokens_per_window=0, concurrent=10)
    assert limiter.admit(tenant, limits).limiter is limiter  # counted: Redis answered
    redis.Redis.from_url(url).client_kill_filter(_id=str(limiter.redis.client_id()))  # as a restart
    # (redis-py finds the closed connection when it takes it from the pool, and connects anew)
    assert limiter.admit(tenant, limits).limiter is limiter  # counted again
    assert state(breaker) is BreakerState.CLOSED and breaker.opened == 0


@pytest.mark.db  # the session's real Redis, a spare database (no worker consumes there)
def test_a_jobs_send_after_redis_closed_the_senders_connection_goes_through(
    redis_clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = spare_redis_url(0)
    db = url.rsplit("/", 1)[1]
    watcher = redis.Redis.from_url(url)
    watcher.flushdb()
    with redis_at(monkeypatch, url):
        send_to_broker(TaskName.RELAY_OUTBOX, {})
        mine = str(watcher.client_id())  # (CLIENT LIST's fields are strings)
        senders = [c["id"] for c in watcher.client_list() if c["db"] == db and c["id"] != mine]
        assert senders  # kombu keeps its connection open between sends
        for client in senders:  # as a Redis restart closes them
            watcher.client_kill_filter(_id=client)
        send_to_broker(TaskName.RELAY_OUTBOX, {})  # kombu connects anew: no error, no outbox
        settings = get_settings()
        breaker = redis_breaker(settings.redis_url, settings.redis_retry_after_s)
        assert state(breaker) is BreakerState.CLOSED and breaker.opened == 0
        assert watcher.llen(str(queue_for(TaskName.RELAY_OUTBOX))) == 2  # both sends queued
    watcher.flushdb()
