"""A purge reaches every runtime replica, or the delete that asked for it is refused.

Any replica may hold a tenant's facts: in its memory tiers (it served the tenant before a
failover, or the tenant moved back), in its catalog and in its prefix cache (the tenant's epoch
lives in each runtime). So a purge is sent to every replica at once, and it has reached a replica
when the replica confirms it (its tiers, its share of the disk, its epoch), or when nothing runs
at the replica's address (connection refused, or its name does not resolve): no process there
holds any memory tier or prefix cache, and one that starts later starts empty and reads the
shared disk store, which the replicas that confirmed have purged. At least one replica must
confirm (someone must have purged the shared disk).

Any other failure (a timeout, an engine starting or dead, an error) leaves a running process that
may still hold the facts, so the purge raises a 503 and the caller's transaction rolls back:
nothing is deleted and the client retries. Replicas that did purge have lost KV that is still
live; the facts fall back to prefill until beat's sweep finds their KV gone and re-encodes it
(never wrong, only slower). A pending purge replayed later was rejected: it needs durable state
shared by every API and worker process and a gate that keeps each of them from routing to a
returning replica before the replay, and it only helps while a replica is running but
unreachable, which is rare; a dead replica (the common failure) blocks nothing.
"""

from __future__ import annotations

from backend.errors import AppError, BadRequestError, UnavailableError
from gpu_runtime.client import protocol as p
from gpu_runtime.client.http import (
    RuntimeClientError,
    RuntimeNotListeningError,
    RuntimeRejectedError,
)
from gpu_runtime.client.replicas import ReplicaSet


def purge_everywhere(replicas: ReplicaSet, request: p.PurgeRequest) -> None:
    """Returns once every replica has purged (or none runs at its address); raises an
    ``AppError`` (503, or 400 for a request a replica refused) otherwise."""
    outcomes = replicas.broadcast(lambda runtime: runtime.purge(request))
    confirmed = [r.url for r, outcome in outcomes if not isinstance(outcome, Exception)]
    failures = [(r.url, outcome) for r, outcome in outcomes
                if isinstance(outcome, Exception)
                and not isinstance(outcome, RuntimeNotListeningError)]  # fmt: skip
    for _, exc in failures:
        if isinstance(exc, RuntimeRejectedError):
            raise BadRequestError(exc.message) from exc
    if failures:
        detail = "; ".join(f"{url}: {_message(exc)}" for url, exc in failures)
        raise UnavailableError(
            f"the purge did not reach every runtime replica ({detail}); nothing was deleted, retry"
        ) from failures[0][1]
    if not confirmed:
        raise UnavailableError(
            "no runtime replica is running to purge the KV store; nothing was deleted, retry"
        )


def _message(exc: Exception) -> str:
    return exc.message if isinstance(exc, RuntimeClientError | AppError) else repr(exc)
