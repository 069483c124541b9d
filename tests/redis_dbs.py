"""Redis databases for one test session: claimed, so that two sessions on one machine (CI and a
developer's run, say) never share a broker. With one shared database, each session's Celery
worker took the other's jobs (whose rows live in the other session's Postgres database) and
each session's start flushed the other's queues: jobs that never finished, in both runs.

Each claim is a key set only if absent in databases 1-15 (0 is the developers' default); the
first ``count`` free ones are this session's. A claim names its host and process: one whose
process is gone from this host is taken over at once (a killed run's claims would otherwise hold
their databases until the TTL, and a few killed runs left the next CI run without enough), and
the TTL frees those of other hosts. Tests that need a broker of their own (a worker killed
mid-job, a server on its own queues) take one of the spares: ``spare_redis_url(i)``.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

CLAIM = "inferscale:test-session-claim"
CLAIM_TTL_S = 2 * 3600  # past the longest suite run (CI's limit is 90 min)
SPARES_VAR = "INFERSCALE_TEST_SPARE_REDIS_URLS"  # read by tests (and their subprocesses)
_SESSION = f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex}"
# Replaces the claim only if it still holds what was read (another session may take it first).
_TAKE_OVER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[3]) return 1
end
return 0
"""


def _abandoned(holder: bytes | str) -> bool:
    """A claim of a process that no longer runs on this host."""
    text = holder.decode(errors="replace") if isinstance(holder, bytes) else holder
    parts = text.split()
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # runs, as another user
        return False
    return False


def _take(client: redis.Redis) -> bool:
    if client.set(CLAIM, _SESSION, nx=True, ex=CLAIM_TTL_S):
        return True
    holder = client.get(CLAIM)
    return (
        holder is not None
        and _abandoned(holder)
        and bool(client.eval(_TAKE_OVER, 1, CLAIM, holder, _SESSION, CLAIM_TTL_S))
    )


def claim(base_url: str, count: int) -> list[str]:
    """``count`` URLs of databases of the Redis at ``base_url`` (``redis://host:port``)."""
    import redis

    urls: list[str] = []
    for db in range(1, 16):
        url = f"{base_url}/{db}"
        if _take(redis.Redis.from_url(url)):
            urls.append(url)
            if len(urls) == count:
                return urls
    release(urls)
    raise RuntimeError(
        f"fewer than {count} free Redis databases at {base_url}: other test sessions hold them "
        f"(a claim of another host lapses within {CLAIM_TTL_S // 3600} h; `redis-cli -n N "
        f"del {CLAIM}` frees database N now)"
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
