"""Throw-away Postgres databases for tests: created, migrated to head, dropped."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ADMIN_DATABASE_URL = os.environ.get(
    "INFERSCALE_TEST_ADMIN_DB", "postgresql://postgres@127.0.0.1:5432/postgres"
)
_BASE = ADMIN_DATABASE_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")


def database_url(name: str) -> str:
    """The SQLAlchemy URL of database ``name`` on the test server."""
    return f"{_BASE}/{name}"


def create_database(name: str) -> str:
    import psycopg

    with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return database_url(name)


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate(url: str) -> None:
    """Alembic upgrade to head, as ``make migrate`` does."""
    from alembic import command
    from alembic.config import Config

    config = Config(str(REPO / "alembic.ini"))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "head")
