"""The Celery configuration every process shares (``backend/jobs/pipeline/broker.py``): how soon
a dead worker's unacknowledged task is looked for again (the redelivery itself runs for real in
tests/worker/test_worker_killed.py), and a send to a Redis that does not answer failing rather
than hanging (the compose test stops Redis's container for real)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from backend.core.config import Settings, get_settings
from backend.jobs.pipeline.broker import (
    celery_config,
    make_celery,
    restore_every_s,
    send_to_broker,
    sender,
)
from backend.jobs.pipeline.tasks import TaskName


def test_the_restore_sweep_runs_a_few_times_per_visibility_timeout_at_most_every_10_s() -> None:
    assert restore_every_s(1800) == 10  # production: kombu's own interval, without its throttle
    assert restore_every_s(20) == 5
    assert restore_every_s(10) == 2
    assert restore_every_s(5) == 1


def test_every_sweep_scans_and_the_workers_app_carries_it() -> None:
    settings = Settings(INFERSCALE_TASK_VISIBILITY_TIMEOUT_S=12)
    options = celery_config(settings)["broker_transport_options"]
    assert options["visibility_timeout"] == 12
    assert options["unacked_restore_interval"] == 3
    assert options["unacked_restore_throttle"] == 1
    app = make_celery(settings)
    with app.connection_for_read() as connection:  # what kombu's Redis transport reads
        assert connection.transport_options["unacked_restore_interval"] == 3
        assert connection.transport_options["unacked_restore_throttle"] == 1


@pytest.fixture
def unreachable_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A Redis address that drops connection attempts, as a stopped container's address or a
    host off the network does: a listener whose accept queue is full (the kernel then drops
    further SYNs, so a connect waits). This process's settings and sender point at it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    for _ in range(3):
        client = socket.socket()
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            client.connect(("127.0.0.1", port))
        queued.append(client)
    url = f"redis://127.0.0.1:{port}/0"
    monkeypatch.setenv("REDIS_URL", url)
    get_settings.cache_clear()
    sender.cache_clear()
    try:
        yield url
    finally:
        for sock in (*queued, listener):
            sock.close()
        monkeypatch.undo()
        get_settings.cache_clear()
        sender.cache_clear()


def test_a_send_to_an_unreachable_redis_fails_instead_of_hanging(unreachable_redis: str) -> None:
    outcome: list[BaseException | None] = []

    def send() -> None:
        try:
            send_to_broker(TaskName.RELAY_OUTBOX, {})
            outcome.append(None)
        except Exception as exc:
            outcome.append(exc)

    sending = threading.Thread(target=send, daemon=True)
    sending.start()
    sending.join(60)  # the kernel alone gives a connect about two minutes
    assert not sending.is_alive(), "the send hung on an unreachable Redis"
    (error,) = outcome
    assert error is not None  # raised: the caller's outbox keeps the job
