"""The Celery configuration every process shares (``backend/jobs/pipeline/broker.py``): how soon
a dead worker's unacknowledged task is looked for again. The redelivery itself runs for real
in tests/worker/test_worker_killed.py."""

from __future__ import annotations

from backend.core.config import Settings
from backend.jobs.pipeline.broker import celery_config, make_celery, restore_every_s


def test_the_restore_sweep_runs_a_few_times_per_visibility_timeout_at_most_every_10_s() -> None:
    assert restore_every_s(1800) == 10  # production: kombu's own interval, without its throttle
    assert restore_every_s(20) == 5
    assert restore_every_s(10) == 2
    assert restore_every_s(5) == 1


def test_every_sweep_scans_and_the_workers_app_carries_it() -> None:
    settings = Settings(INFERSCALE_TASK_VISIBILITY_TIMEOUT_S=12)
    options = celery_config(settings)["broker_transport_options"]
    assert options == {
        "visibility_timeout": 12,
        "unacked_restore_interval": 3,
        "unacked_restore_throttle": 1,
    }
    app = make_celery(settings)
    with app.connection_for_read() as connection:  # what kombu's Redis transport reads
        assert connection.transport_options["unacked_restore_interval"] == 3
        assert connection.transport_options["unacked_restore_throttle"] == 1
