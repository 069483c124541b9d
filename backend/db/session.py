"""Engine, sessions and after-commit hooks, bound to the process's settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from backend.core.config import Settings, get_settings

AFTER_COMMIT = "inferscale_after_commit"


def pool_limits(settings: Settings) -> tuple[int, int]:
    """(pool size, overflow) of one process: as configured, cut to its share of
    ``DATABASE_MAX_CONNECTIONS`` among the API's processes, so that together they never reach
    the server's own limit."""
    share = max(1, settings.database_max_connections // settings.api_workers)
    size = min(settings.database_pool_size, share)
    return size, min(settings.database_pool_overflow, share - size)


@lru_cache
def get_engine() -> Engine:
    settings = get_settings()
    size, overflow = pool_limits(settings)
    # The API retrieves in a thread pool of 40: its connections must not be the limit. Waiting
    # for one is bounded, and a wait that times out is a 503 (backend.api.errors).
    return create_engine(
        settings.database_url,
        pool_pre_ping=True,
        pool_size=size,
        max_overflow=overflow,
        pool_timeout=settings.database_pool_timeout_s,
    )


def open_connections(count: int) -> int:
    """Opens up to ``count`` connections (no more than the pool keeps) and returns them to the
    pool; how many were opened."""
    engine = get_engine()
    held = []
    try:
        for _ in range(min(count, pool_limits(get_settings())[0])):
            held.append(engine.connect())
    finally:
        for connection in held:
            connection.close()
    return len(held)


@lru_cache
def session_factory() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


READS_ONLY = "inferscale_reads_only"


@lru_cache
def read_session_factory() -> sessionmaker[Session]:
    """Sessions for work that only reads (a chat's retrieval): each statement commits by itself,
    so there are no BEGIN and COMMIT round trips (0.26 against 0.11 ms a query on the 2-core
    box). Under READ COMMITTED each statement of a transaction sees its own snapshot anyway:
    the reads see what they would see in one. Never for writes (they would not be atomic)."""
    engine = get_engine().execution_options(isolation_level="AUTOCOMMIT")
    return sessionmaker(bind=engine, expire_on_commit=False, info={READS_ONLY: True})


def release_connection(session: Session) -> None:
    """Before a wait that needs no database (a chat's query embedding): a read session hands
    its connection back to the pool (no round trip: it has no transaction to end; what it
    loaded stays loaded), so that chats waiting for their embeddings do not hold the pool a
    process shares. A session that writes keeps its transaction: nothing happens."""
    if session.info.get(READS_ONLY):
        session.commit()


def after_commit(session: Session, action: Callable[[], None]) -> None:
    """Run ``action`` once the session's transaction has committed (e.g. enqueue a job that must
    see the rows this transaction wrote); dropped if it rolls back."""
    session.info.setdefault(AFTER_COMMIT, []).append(action)


def run_after_commit(session: Session) -> None:
    for action in session.info.pop(AFTER_COMMIT, []):
        action()


def commit(session: Session) -> None:
    session.commit()
    run_after_commit(session)


@contextmanager
def session_scope() -> Iterator[Session]:
    """One unit of work: commit (then after-commit hooks) on success, roll back on error."""
    with session_factory()() as session:
        try:
            yield session
            commit(session)
        except BaseException:
            session.rollback()
            session.info.pop(AFTER_COMMIT, None)
            raise
