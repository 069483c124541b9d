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


def test_another_session_gets_other_databases_and_a_release_frees_them() -> None:
    mine = redis_dbs.claim(BASE, 2)
    try:
        theirs = subprocess.run(
            [sys.executable, "-c", OTHER_SESSION], capture_output=True, text=True, cwd=REPO,
            check=True, timeout=60,
        ).stdout.strip().split(",")  # fmt: skip
        assert len(theirs) == 2 and not set(mine) & set(theirs)
    finally:
        redis_dbs.release(mine)
    again = redis_dbs.claim(BASE, 2)  # what was released is free again
    redis_dbs.release(again)
    assert set(again) & set(mine + theirs)
