"""``python -m worker worker|beat [celery options]``: the Celery worker or beat, after a check of
the settings, so that a process that cannot start says why in one line and exits non-zero
(Celery's own failure to load its app is a traceback)."""

from __future__ import annotations

import sys

EXIT_CANNOT_START = 2


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("worker", "beat"):
        print("usage: python -m worker worker|beat [celery options]", file=sys.stderr)
        return EXIT_CANNOT_START
    from backend.cli import one_line_reason

    try:
        from backend.core.config import get_settings
        from backend.resources import index_device_error

        if problem := index_device_error(get_settings()):
            raise ValueError(problem)
    except ValueError as exc:  # pydantic's ValidationError is one
        print(f"inferscale {args[0]}: cannot start: {one_line_reason(exc)}", file=sys.stderr)
        return EXIT_CANNOT_START
    from worker.celery_app import celery_app

    if args[0] == "beat":
        args = [*args[:1], "--scheduler=worker.beat:HeartbeatScheduler", *args[1:]]
    code = celery_app.start(args)  # returns when the worker or beat stops
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
