"""``inferscale bench redis-outage``: what the API's Redis calls cost a request while Redis's
address drops connection attempts (a stopped container, a host off the network).

Points this process's settings at such an address (a local listener whose accept queue is full,
so the kernel drops further SYNs) and times, request after request, the Redis calls a chat makes
before its answer (the API-key cache's generation, the tenant's admission) and those a memory
write adds (the job's send to the broker), through the API's own classes. No Postgres, runtime
or API process: the calls the API makes, and only them. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def dropping_address() -> Iterator[str]:
    """A Redis URL whose connection attempts are never answered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    for _ in range(3):  # fill the accept queue: later SYNs are dropped
        client = socket.socket()
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            client.connect(("127.0.0.1", port))
        queued.append(client)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        for sock in (*queued, listener):
            sock.close()


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    with contextlib.suppress(Exception):  # the send raises: the outbox keeps the job
        call()
    return round(time.perf_counter() - started, 3)


def run(requests: int) -> dict[str, Any]:
    with dropping_address() as url:
        os.environ["REDIS_URL"] = url
        from backend.core.config import get_settings
        from backend.jobs.pipeline.broker import send_to_broker
        from backend.jobs.pipeline.tasks import TaskName
        from backend.resources import Resources
        from backend.services.rate_limits import TenantLimits
        from gpu_runtime.types import TenantId

        get_settings.cache_clear()
        resources = Resources(get_settings(), engine=None)  # type: ignore[arg-type]
        limiter, credentials = resources.limiter, resources.credentials
        tenant = TenantId(str(uuid.uuid4()))
        limits = TenantLimits(requests_per_window=0, tokens_per_window=0, concurrent=0)
        rows = []
        for i in range(requests):
            row = {
                "request": i + 1,
                "key_cache_generation_s": _timed(credentials.generation),
                "admission_s": _timed(lambda: limiter.admit(tenant, limits)),
                "job_send_s": _timed(lambda: send_to_broker(TaskName.RELAY_OUTBOX, {})),
            }
            row["chat_s"] = round(row["key_cache_generation_s"] + row["admission_s"], 3)
            row["write_s"] = round(row["chat_s"] + row["job_send_s"], 3)
            rows.append(row)
    return {"redis_url": "a listener with a full accept queue", "requests": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale bench redis-outage", description=__doc__)
    parser.add_argument("--requests", type=int, default=5)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.requests), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
