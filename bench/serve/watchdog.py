"""A bench that stops making progress fails, with every thread's stack on stderr, instead of
holding its caller: a device call ends at its limit and returns nothing (run 19's first `bench
serve` stalled in its warm-up for seven minutes, and nothing was left to say where).

``arm`` once, ``progress`` at each step that should finish within the limit (the warm-up, a
cell), ``disarm`` at the end. faulthandler does the dump from its own thread, so a stuck event
loop or a blocked call cannot keep it from firing; the process then exits with status 1.
"""

from __future__ import annotations

import faulthandler
import sys

_limit_s: float | None = None


def arm(stall_s: float | None) -> None:
    """From now on, ``stall_s`` seconds without ``progress`` end the process (None or 0: off)."""
    global _limit_s
    _limit_s = stall_s or None
    progress()


def progress() -> None:
    """The bench moved on: the next ``stall_s`` seconds start now."""
    if _limit_s is not None:
        faulthandler.dump_traceback_later(_limit_s, exit=True, file=sys.stderr)


def disarm() -> None:
    global _limit_s
    _limit_s = None
    faulthandler.cancel_dump_traceback_later()
