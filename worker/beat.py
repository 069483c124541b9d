"""Celery beat's scheduler with a heartbeat: every tick touches a file, so a healthcheck can tell
a beat that schedules from one that hangs (``python -m worker.beat --check``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler

HEARTBEAT_VAR = "INFERSCALE_BEAT_HEARTBEAT"
# beat ticks at least once per relay period (15 s); a few missed ticks mean it is stuck.
STALE_AFTER_S = 60.0


def heartbeat_path() -> Path:
    default = Path(os.environ.get("INFERSCALE_HOME", Path.home() / ".cache" / "inferscale"))
    return Path(os.environ.get(HEARTBEAT_VAR, default / "beat-heartbeat"))


class HeartbeatScheduler(PersistentScheduler):  # type: ignore[misc]
    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval: float = super().tick(*args, **kwargs)
        path = heartbeat_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return interval


def check(stale_after_s: float = STALE_AFTER_S) -> str | None:
    """None if beat ticked within ``stale_after_s``, else why not."""
    path = heartbeat_path()
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return f"no heartbeat at {path}: beat has not ticked yet"
    return None if age <= stale_after_s else f"beat last ticked {age:.0f} s ago ({path})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.beat")
    parser.add_argument("--check", action="store_true", help="exit 1 unless beat ticks")
    parser.add_argument("--stale-after", type=float, default=STALE_AFTER_S)
    args = parser.parse_args(argv)
    problem = check(args.stale_after) if args.check else None
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
