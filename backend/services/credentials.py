"""API keys checked against Postgres once per process, not on every request.

Every request authenticates; on the H200 host the key's query and its transaction were a
Postgres round trip or three of the ~5 ms a chat spent before its retrieval (docs/benchmarks.md,
"What a tenant's app sees"). A process keeps what a key resolved to (its scope, tenant and the
tenant's limit overrides), under the **generation** read from Redis before the lookup. Whatever
changes what a key resolves to (a revocation, a rotation, a tenant's deletion, new limits)
increments the generation once its transaction has committed, and an entry serves only while
the generation it was stored under is still the current one: the next request after the admin
call returns, on any API process, goes back to Postgres. Costs one Redis ``GET`` per request
instead of the Postgres round trips.

Where Redis cannot be read, nothing is served from the cache (every request queries Postgres;
with the process's Redis breaker open, without waiting for Redis first);
where the generation could not be incremented after a change (Redis down at that moment), an
entry still expires after ``ttl_s``; a Redis that lost the generation (restarted without its
data) starts it again at a random number, so no entry stored before matches it. Unknown keys
are never cached.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend.core.breaker import CircuitBreaker, DependencyDown, redis_failures
from backend.repositories.tenants import LimitOverrides

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

GENERATION_KEY = "inferscale:auth:generation"


@dataclass(frozen=True)
class Credential:
    """What a valid key resolves to."""

    scope: str  # "tenant" (the admin key is a setting, never cached)
    tenant_id: uuid.UUID | None
    limits: LimitOverrides


@dataclass(frozen=True)
class _Entry:
    credential: Credential
    generation: int
    stored_at: float  # time.monotonic()


class CredentialCache:
    """Resolved keys by their peppered hash, least recently used dropped over ``max_entries``;
    ``max_entries=0`` turns the cache off (every request queries Postgres)."""

    def __init__(
        self, client: redis.Redis, breaker: CircuitBreaker, max_entries: int, ttl_s: float
    ) -> None:
        self.redis = client
        self.breaker = breaker
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def generation(self) -> int | None:
        """The current generation, or None where Redis cannot say (then nothing is cached)."""
        import redis

        if not self.enabled:
            return None
        try:
            with self.breaker.guard(redis_failures()):
                value = self.redis.get(GENERATION_KEY)
                if value is None:
                    # Missing (a fresh or flushed Redis): begin at a random generation, never at
                    # a number entries may already hold from before the loss.
                    self.redis.set(GENERATION_KEY, secrets.randbits(62), nx=True)
                    value = self.redis.get(GENERATION_KEY)
        except DependencyDown:
            return None
        except redis.RedisError as exc:
            logger.warning("API keys not served from the cache (Redis: %s)", exc)
            return None
        return int(value) if value is not None else None

    def get(self, key_hash: str, generation: int | None) -> Credential | None:
        if generation is None:
            return None
        with self._lock:
            entry = self._entries.get(key_hash)
            fresh = (
                entry is not None
                and entry.generation == generation
                and time.monotonic() - entry.stored_at < self.ttl_s
            )
            if entry is None or not fresh:
                self.misses += 1
                if entry is not None:
                    del self._entries[key_hash]
                return None
            self._entries.move_to_end(key_hash)
            self.hits += 1
            return entry.credential

    def put(self, key_hash: str, credential: Credential, generation: int | None) -> None:
        """``generation``: the one read *before* the lookup that found ``credential`` (a change
        committed after that read increments past it, so the entry is never served again)."""
        if generation is None or not self.enabled:
            return
        with self._lock:
            self._entries[key_hash] = _Entry(credential, generation, time.monotonic())
            self._entries.move_to_end(key_hash)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def invalidate(self) -> None:
        """After a committed change to keys, tenants or limits: every process's entries stop
        serving (and this process's are dropped at once)."""
        import redis

        with self._lock:
            self._entries.clear()
        try:
            # Tried even with the breaker open: Redis may be back before the breaker knows, and
            # another process serving a revoked key from its cache is worse than this wait.
            self.redis.incr(GENERATION_KEY)
        except redis.RedisError as exc:
            logger.error(
                "API key caches not invalidated (Redis: %s); other API processes may accept "
                "a revoked key or old limits for up to %.0f s",
                exc,
                self.ttl_s,
            )

    def __len__(self) -> int:
        return len(self._entries)
