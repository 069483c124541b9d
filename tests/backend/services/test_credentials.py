"""The API-key cache against the session's real Redis: entries serve only under the generation
they were stored at, a change anywhere invalidates them everywhere, and without Redis nothing is
served from it."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import redis

from backend.core.breaker import CircuitBreaker
from backend.repositories.tenants import LimitOverrides
from backend.services.credentials import GENERATION_KEY, Credential, CredentialCache

pytestmark = pytest.mark.db  # real Redis


def _breaker(client: redis.Redis) -> CircuitBreaker:
    return CircuitBreaker("Redis", 60, client.ping)


def _cache(client: redis.Redis) -> CredentialCache:
    return CredentialCache(client, _breaker(client), 10, 60)


def _credential() -> Credential:
    return Credential("tenant", uuid.uuid4(), LimitOverrides(requests_per_minute=7))


@pytest.fixture
def client(redis_clean: None) -> redis.Redis:
    return redis.Redis.from_url(os.environ["REDIS_URL"])


def test_an_entry_serves_until_any_process_invalidates(client: redis.Redis) -> None:
    mine = CredentialCache(client, _breaker(client), max_entries=10, ttl_s=60)
    other = _cache(redis.Redis.from_url(os.environ["REDIS_URL"]))
    credential = _credential()
    generation = mine.generation()
    assert mine.get("h1", generation) is None  # never stored
    mine.put("h1", credential, generation)
    assert mine.get("h1", mine.generation()) == credential
    other.invalidate()  # another process revoked a key: the generation moved past ours
    assert mine.get("h1", mine.generation()) is None
    assert len(mine) == 0  # and the stale entry is gone
    assert (mine.hits, mine.misses) == (1, 2)


def test_a_lookup_raced_by_a_change_is_never_served(client: redis.Redis) -> None:
    cache = _cache(client)
    before = cache.generation()  # read, then the Postgres lookup...
    cache.invalidate()  # ...while a revocation commits and invalidates
    cache.put("h1", _credential(), before)  # the lookup's (maybe stale) answer
    assert cache.get("h1", cache.generation()) is None


def test_a_lost_generation_never_revives_old_entries(client: redis.Redis) -> None:
    """A fresh Redis, an entry, a revocation, then Redis restarted empty: the generation
    starts again at a random number, not where the entry's began (it would serve again)."""
    cache = _cache(client)
    client.delete(GENERATION_KEY)  # a fresh Redis
    cache.put("h1", _credential(), cache.generation())
    _cache(client).invalidate()  # another process revokes the key
    client.delete(GENERATION_KEY)  # Redis restarted without its data
    assert cache.get("h1", cache.generation()) is None
    assert cache.generation() == cache.generation()  # stable once set


def test_entries_expire_and_stay_bounded(client: redis.Redis) -> None:
    cache = CredentialCache(client, _breaker(client), max_entries=2, ttl_s=0.2)
    generation = cache.generation()
    for name in ("a", "b", "c"):
        cache.put(name, _credential(), generation)
    assert len(cache) == 2 and cache.get("a", generation) is None  # least recently used out
    assert cache.get("c", generation) is not None
    time.sleep(0.25)
    assert cache.get("c", generation) is None  # past its TTL


def test_off_or_without_redis_nothing_is_served(client: redis.Redis) -> None:
    off = CredentialCache(client, _breaker(client), max_entries=0, ttl_s=60)
    assert off.generation() is None
    off.put("h", _credential(), 0)
    assert off.get("h", 0) is None and len(off) == 0
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    down = _cache(unreachable)
    assert down.generation() is None
    down.put("h", _credential(), None)
    assert down.get("h", None) is None
    before = client.get(GENERATION_KEY)
    down.invalidate()  # logged, never raised: the admin call that committed still answers
    assert client.get(GENERATION_KEY) == before
