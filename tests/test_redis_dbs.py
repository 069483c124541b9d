"""Two test sessions on one machine claim disjoint Redis databases (tests/redis_dbs.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import redis_dbs
from tests.databases import REPO

pytestmark = pytest.mark.broker

BASE = "redis://127.0.0.1:6379"
OTHER_SESSION = (
    f"from tests import redis_dbs as r; u = r.claim('{BASE}', 2); print(','.join(u)); r.release(u)"
)
KILLED_SESSION = f"from tests import redis_dbs as r; print(','.join(r.claim('{BASE}', 2)))"


def _session(code: str) -> list[str]:
    """Runs ``code`` as another test session (its own process) and returns what it printed."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(",")


def test_another_session_gets_other_databases_and_a_release_frees_them() -> None:
    mine = redis_dbs.claim(BASE, 2)
    try:
        theirs = _session(OTHER_SESSION)
        assert len(theirs) == 2 and not set(mine) & set(theirs)
    finally:
        redis_dbs.release(mine)
    again = redis_dbs.claim(BASE, 2)  # what was released is free again
    redis_dbs.release(again)
    assert set(again) & set(mine + theirs)


def test_a_session_that_died_without_releasing_leaves_its_databases_free() -> None:
    """A killed run's claims (its process gone from this host) are taken over at once, not
    held for the TTL: a few killed runs once left the next CI run short of databases."""
    dead = _session(KILLED_SESSION)  # exits without releasing
    mine = redis_dbs.claim(BASE, 2)
    redis_dbs.release(mine)
    assert set(mine) == set(dead)  # the first free ones again: what the dead session held
