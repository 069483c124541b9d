"""Per-tenant limits, counted in Redis so they hold across API processes and hosts: requests
and tokens per window (fixed windows, OpenAI's per-minute limits) and requests in flight.

One Lua script checks every limit and, only if all pass, counts the request and takes a slot in
flight, so a refused request leaves nothing counted (nothing half-done). A slot in flight is a
member of a sorted set scored by its lease's end: a process that dies mid-request leaks nothing
past the lease. Tokens are counted after the answer (prompt + completion, as OpenAI does) and
refuse the next requests of the window once the limit is reached.

Redis unreachable: requests are let in unchecked (limits protect the platform; an outage of
theirs must not take the API down with it), and after the first call that finds it so, at once
(the process's Redis breaker, ``backend.core.breaker``), not after a connect timeout each.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from backend.core.breaker import CircuitBreaker, DependencyDown, redis_failures
from backend.errors import RateLimitedError, UnavailableError
from gpu_runtime.types import TenantId

logger = logging.getLogger(__name__)

LEASE_S = 900  # a slot in flight outlives any request (the runtime's timeout is 300 s)

_ADMIT = """
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_conc, max_req, max_tok = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local window = tonumber(ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local active = redis.call('ZCARD', KEYS[1])
local reqs = tonumber(redis.call('GET', KEYS[2]) or '0')
local toks = tonumber(redis.call('GET', KEYS[3]) or '0')
local refused = 0
if max_req > 0 and reqs >= max_req then refused = 1
elseif max_tok > 0 and toks >= max_tok then refused = 2
elseif max_conc > 0 and active >= max_conc then refused = 3 end
if refused > 0 then
  redis.call('INCR', KEYS[4])
  return {refused, reqs, toks, active}
end
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], 2 * window)
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
return {0, reqs + 1, toks, active + 1}
"""

REFUSED = {1: "requests", 2: "tokens", 3: "concurrent"}


@dataclass(frozen=True)
class TenantLimits:
    """0: no limit."""

    requests_per_window: int
    tokens_per_window: int
    concurrent: int
    weight: float = 1.0  # not a limit: the tenant's share of the engine, carried to the runtime


@dataclass
class Admission:
    """A request let in: its slot in flight is given back by ``release`` (once)."""

    limiter: RateLimiter | None
    tenant: TenantId
    member: str
    bucket: int
    weight: float = 1.0
    headers: dict[str, str] = field(default_factory=dict)
    released: bool = False

    def record_tokens(self, tokens: int) -> None:
        if self.limiter is not None and tokens > 0:
            self.limiter.record_tokens(self, tokens)

    def release(self) -> None:
        if not self.released and self.limiter is not None:
            self.released = True
            self.limiter.release(self)


def _duration(seconds: float) -> str:
    """OpenAI's reset format ("1s", "6m0s", "0.5s")."""
    if seconds >= 60:
        return f"{int(seconds // 60)}m{int(seconds % 60)}s"
    return f"{seconds:.3g}s"


class RateLimiter:
    def __init__(self, redis_url: str, window_s: float, breaker: CircuitBreaker) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No retries: another attempt at an unreachable Redis only adds its wait, and the
        # breaker, not the client, decides when to try again.
        self.redis = redis.Redis.from_url(
            redis_url, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
        )
        self.window_ms = int(window_s * 1000)
        self.breaker = breaker
        self._admit = self.redis.register_script(_ADMIT)

    def _keys(self, tenant: TenantId, bucket: int) -> list[str]:
        base = f"inferscale:limits:{tenant.value}"
        return [f"{base}:active", f"{base}:req:{bucket}", f"{base}:tok:{bucket}",
                f"{base}:limited"]  # fmt: skip

    def admit(self, tenant: TenantId, limits: TenantLimits) -> Admission:
        """Lets the request in or raises ``RateLimitedError``. If Redis cannot be reached the
        request is let in (limits protect the platform; an outage of theirs must not take the
        API down with it) and the failure is logged."""
        import redis

        now_ms = int(time.time() * 1000)
        bucket = now_ms // self.window_ms
        reset_s = ((bucket + 1) * self.window_ms - now_ms) / 1000
        member = uuid.uuid4().hex
        args: list[int | str] = [now_ms, LEASE_S * 1000, member, limits.concurrent,
                limits.requests_per_window, limits.tokens_per_window, self.window_ms]  # fmt: skip
        try:
            with self.breaker.guard(redis_failures()):
                result = self._admit(keys=self._keys(tenant, bucket), args=args)
            refused, reqs, toks, _active = (int(v) for v in result)
        except DependencyDown:
            return Admission(None, tenant, member, bucket, limits.weight)
        except redis.RedisError as exc:
            logger.warning("rate limits not checked (Redis: %s); request let in", exc)
            return Admission(None, tenant, member, bucket, limits.weight)
        headers = self._headers(limits, reqs, toks, reset_s)
        if refused:
            kind = REFUSED[refused]
            # In flight: no reset time is known; a second is the SDK's shortest sensible wait.
            wait = 1.0 if kind == "concurrent" else reset_s
            headers["retry-after"] = str(max(1, math.ceil(wait)))
            headers["retry-after-ms"] = str(max(1, int(wait * 1000)))
            limit = {"requests": limits.requests_per_window, "tokens": limits.tokens_per_window,
                     "concurrent": limits.concurrent}[kind]  # fmt: skip
            what = {"requests": "requests per window", "tokens": "tokens per window",
                    "concurrent": "requests in flight"}[kind]  # fmt: skip
            raise RateLimitedError(
                f"rate limit reached for this tenant: {limit} {what}; retry after "
                f"{headers['retry-after']} s",
                headers,
            )
        return Admission(self, tenant, member, bucket, limits.weight, headers)

    def _headers(
        self, limits: TenantLimits, reqs: int, toks: int, reset_s: float
    ) -> dict[str, str]:
        headers: dict[str, str] = {}
        if limits.requests_per_window:
            headers["x-ratelimit-limit-requests"] = str(limits.requests_per_window)
            headers["x-ratelimit-remaining-requests"] = str(
                max(0, limits.requests_per_window - reqs)
            )
            headers["x-ratelimit-reset-requests"] = _duration(reset_s)
        if limits.tokens_per_window:
            headers["x-ratelimit-limit-tokens"] = str(limits.tokens_per_window)
            headers["x-ratelimit-remaining-tokens"] = str(max(0, limits.tokens_per_window - toks))
            headers["x-ratelimit-reset-tokens"] = _duration(reset_s)
        return headers

    def record_tokens(self, admission: Admission, tokens: int) -> None:
        key = self._keys(admission.tenant, admission.bucket)[2]
        try:
            with self.breaker.guard(redis_failures()):
                pipe = self.redis.pipeline()
                pipe.incrby(key, tokens)
                pipe.pexpire(key, 2 * self.window_ms)
                pipe.execute()
        except Exception as exc:  # observability of a limit: never fails the answer
            logger.warning("tokens not counted for %s: %s", admission.tenant.value, exc)

    def release(self, admission: Admission) -> None:
        try:
            with self.breaker.guard(redis_failures()):
                self.redis.zrem(self._keys(admission.tenant, admission.bucket)[0], admission.member)
        except Exception as exc:  # the lease ends it anyway
            logger.warning("slot in flight not released for %s: %s", admission.tenant.value, exc)

    def forget(self, tenant: TenantId) -> None:
        """Every counter of the tenant (its deletion leaves nothing behind). A 503 without Redis:
        the delete fails whole and can be retried."""
        with self._reachable():
            keys = list(
                self.redis.scan_iter(match=f"inferscale:limits:{tenant.value}:*", count=100)
            )
            if keys:
                self.redis.delete(*keys)

    def usage(self, tenant: TenantId) -> dict[str, Any]:
        """The tenant's current window and requests in flight (the admin API, the dashboard)."""
        now_ms = int(time.time() * 1000)
        bucket = now_ms // self.window_ms
        active, reqs, toks, limited = self._keys(tenant, bucket)
        with self._reachable():
            self.redis.zremrangebyscore(active, "-inf", now_ms)
            return {
                "in_flight": int(self.redis.zcard(active)),
                "requests_this_window": int(self.redis.get(reqs) or 0),
                "tokens_this_window": int(self.redis.get(toks) or 0),
                "limited_total": int(self.redis.get(limited) or 0),  # 429s since the key began
                "window_s": self.window_ms / 1000,
            }

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        """An operator's call that needs Redis: a 503 saying so when it cannot be reached."""
        unreachable: tuple[type[BaseException], ...] = (DependencyDown, *redis_failures())
        try:
            with self.breaker.guard(redis_failures()):
                yield
        except unreachable as exc:
            raise UnavailableError(f"the rate limits' store (Redis) is unreachable: {exc}") from exc
