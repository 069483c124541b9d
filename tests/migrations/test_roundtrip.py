"""Alembic: empty -> head -> base -> head on a scratch database, and the models match head."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from backend.db.base import Base
from tests.databases import REPO

pytestmark = pytest.mark.db


def _config(url: str) -> Config:
    config = Config(str(REPO / "alembic.ini"))
    config.set_main_option("sqlalchemy.url", url)
    return config


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(scratch_database_url: str) -> None:
    config = _config(scratch_database_url)
    assert _tables(scratch_database_url) == set()

    command.upgrade(config, "head")
    at_head = _tables(scratch_database_url)
    assert {"tenants", "api_keys", "facts", "fact_history", "fact_encodings", "jobs"} <= at_head

    command.downgrade(config, "base")
    assert _tables(scratch_database_url) == {"alembic_version"}

    command.upgrade(config, "head")
    assert _tables(scratch_database_url) == at_head


def test_models_match_migrations(scratch_database_url: str) -> None:
    command.upgrade(_config(scratch_database_url), "head")
    engine = create_engine(scratch_database_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert diff == [], f"models and migrations disagree: {diff}"
