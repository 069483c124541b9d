"""Redis databases for one test session: claimed, so that two sessions on one machine (CI and a
developer's run, say) never share a broker. With one shared database, each session's Celery
worker took the other's jobs (whose rows live in the other session's Postgres database) and
each session's start flushed the other's queues: jobs that never finished, in both runs.

Each claim is a key set only if absent (with a TTL, so a killed session's claim lapses) in
databases 1-15 (0 is the developers' default); the first ``count`` free ones are this
session's. Tests that need a broker of their own (a worker killed mid-job, a server on its own
queues) take one of the spares: ``spare_redis_url(i)``.
"""

from __future__ import annotations

import os
import uuid

CLAIM = "inferscale:test-session-claim"
CLAIM_TTL_S = 2 * 3600  # past the longest suite run (CI's limit is 90 min)
SPARES_VAR = "INFERSCALE_TEST_SPARE_REDIS_URLS"  # read by tests (and their subprocesses)
_SESSION = uuid.uuid4().hex


def claim(base_url: str, count: int) -> list[str]:
    """``count`` URLs of databases of the Redis at ``base_url`` (``redis://host:port``)."""
    import redis

    urls: list[str] = []
    for db in range(1, 16):
        url = f"{base_url}/{db}"
        if redis.Redis.from_url(url).set(CLAIM, _SESSION, nx=True, ex=CLAIM_TTL_S):
            urls.append(url)
            if len(urls) == count:
                return urls
    release(urls)
    raise RuntimeError(
        f"fewer than {count} free Redis databases at {base_url}: other test sessions hold them "
        f"(a killed session's claim lapses within {CLAIM_TTL_S // 3600} h; `redis-cli -n N del "
        f"{CLAIM}` frees database N now)"
    )


def flush(url: str) -> None:
    """Empties a database of this session's, keeping its claim."""
    import redis

    client = redis.Redis.from_url(url)
    claimed = client.get(CLAIM) == _SESSION.encode()
    client.flushdb()
    if claimed:
        client.set(CLAIM, _SESSION, ex=CLAIM_TTL_S)


def release(urls: list[str]) -> None:
    import redis

    for url in urls:
        client = redis.Redis.from_url(url)
        if client.get(CLAIM) == _SESSION.encode():
            client.delete(CLAIM)


def spare_redis_url(index: int) -> str:
    """The session's ``index``-th spare database (0, 1, 2), empty of other sessions' work."""
    return os.environ[SPARES_VAR].split(",")[index]
