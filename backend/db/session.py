"""Engine and session factory bound to the process's settings."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from backend.core.config import get_settings


@lru_cache
def get_engine() -> Engine:
    return create_engine(get_settings().database_url, pool_pre_ping=True)


def session_scope() -> Iterator[Session]:
    """One session per unit of work; commit on success, roll back on any error."""
    factory = sessionmaker(bind=get_engine(), expire_on_commit=False)
    with factory() as session, session.begin():
        yield session
