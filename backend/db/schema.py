"""Whether the database's schema is the one this code was written for (Alembic's head).

An API started before ``inferscale migrate`` finished (or after a deploy that skipped it)
reached Postgres fine, so ``/readyz`` said ready, and every chat then failed with a 500
("relation tenants does not exist"). Readiness now says what is wrong and what to run."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sqlalchemy import Connection, text
from sqlalchemy.exc import ProgrammingError

ALEMBIC_INI = Path(__file__).resolve().parents[2] / "alembic.ini"
MIGRATE = "run `inferscale migrate`"


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    """The migrations' head revision; None where the migrations are not shipped beside the code
    (the schema's presence is checked then, not its revision)."""
    if not ALEMBIC_INI.exists():
        return None
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(Config(str(ALEMBIC_INI))).get_current_head()


def schema_problem(conn: Connection) -> str | None:
    """None when the schema is at head, else what is wrong and what to run."""
    try:
        current = conn.execute(text("select version_num from alembic_version")).scalar()
    except ProgrammingError:  # no alembic_version table: never migrated
        conn.rollback()
        return f"schema not migrated: {MIGRATE}"
    head = head_revision()
    if current is None:
        return f"schema not migrated: {MIGRATE}"
    if head is not None and current != head:
        return f"schema at revision {current}, this version needs {head}: {MIGRATE}"
    return None
