"""The backend's processes and operations on the command line (``inferscale api``, ``dashboard``,
``migrate``, ``secrets``): each says in one line why it cannot start. ``inferscale`` (the
``inferscale`` package) adds the tools: demo, benchmarks, evaluations."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.core.config import Settings


EXIT_CANNOT_START = 2


def one_line_reason(exc: BaseException) -> str:
    """An error as one line; a settings error lists each refused variable and why."""
    from gpu_runtime.client.startup import settings_error

    return settings_error(exc) or " ".join(str(exc).split())


def cannot_start(what: str, exc: BaseException) -> int:
    """A process that cannot start says why in one line on stderr and exits non-zero."""
    print(f"inferscale {what}: cannot start: {one_line_reason(exc)}", file=sys.stderr, flush=True)
    return EXIT_CANNOT_START


def run_api(args: argparse.Namespace) -> int:
    """The API on ``INFERSCALE_API_HOST``/``PORT``."""
    import uvicorn

    from backend.core.config import get_settings
    from backend.resources import index_device_error

    try:
        settings = get_settings()
        settings.refuse_exposed_placeholders(settings.api_host)
        if problem := index_device_error(settings):
            raise ValueError(problem)
    except ValueError as exc:  # pydantic's ValidationError is one
        return cannot_start("api", exc)
    with metrics_shared(settings.api_workers):
        # Keep-alive longer than clients' pools keep idle connections (aiohttp 15 s, httpx 5 s):
        # a connection the server dropped must never be picked for the client's next request.
        uvicorn.run(
            "backend.main:app", host=settings.api_host, port=settings.api_port,
            log_level="info", timeout_keep_alive=75, workers=settings.api_workers,
        )  # fmt: skip
    return 0


@contextmanager
def metrics_shared(workers: int) -> Iterator[None]:
    """With several API processes, their Prometheus values in files of one directory that
    ``/metrics`` sums (``backend/api/metrics.py``): an operator's ``PROMETHEUS_MULTIPROC_DIR``,
    emptied first (a previous run's counts would be added), else a temporary one."""
    from backend.api.metrics import MULTIPROCESS_DIR

    if workers <= 1:
        yield
        return
    given = os.environ.get(MULTIPROCESS_DIR)
    directory = Path(given) if given else Path(tempfile.mkdtemp(prefix="inferscale-metrics-"))
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROCESS_DIR] = str(directory)  # the worker processes inherit it
    try:
        yield
    finally:
        if not given:
            shutil.rmtree(directory, ignore_errors=True)


def autologs_in(settings: Settings) -> bool:
    """Dev and demo on this host only: the operator is logged in already. Reachable from other
    hosts (compose's container address, a published port) the operator types the key."""
    from gpu_runtime.client.startup import is_loopback

    return settings.environment != "prod" and is_loopback(settings.dashboard_host)


def run_dashboard(args: argparse.Namespace) -> int:
    """The operator dashboard on ``INFERSCALE_DASHBOARD_PORT`` (Streamlit, headless)."""

    from backend.core.config import get_settings

    try:
        settings = get_settings()
    except ValueError as exc:
        return cannot_start("dashboard", exc)
    os.environ.setdefault("INFERSCALE_API_URL", f"http://127.0.0.1:{settings.api_port}")
    if autologs_in(settings):
        os.environ.setdefault("INFERSCALE_ADMIN_KEY", settings.admin_api_key)
    else:
        os.environ.pop("INFERSCALE_ADMIN_KEY", None)
    app = Path(__file__).resolve().parents[1] / "dashboard" / "streamlit_app.py"
    os.execvp(
        sys.executable,
        [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless=true",
         f"--server.address={settings.dashboard_host}",
         f"--server.port={settings.dashboard_port}", "--browser.gatherUsageStats=false",
         "--client.toolbarMode=viewer"],
    )  # fmt: skip


def run_secrets(args: argparse.Namespace) -> int:
    """``secrets init``: generate the missing secrets into INFERSCALE_SECRETS_DIR (compose's
    one-shot service); ``secrets show NAME``: print one (how an operator reads the admin key)."""

    from backend.core import secrets
    from backend.core.config import SECRETS_DIR_VAR

    configured = os.environ.get(SECRETS_DIR_VAR)
    if not configured:
        return cannot_start("secrets", ValueError(f"{SECRETS_DIR_VAR} is not set"))
    directory = Path(configured)
    if args.action == "show":
        try:
            print(secrets.read(directory, args.name))
        except (KeyError, OSError) as exc:
            print(f"inferscale secrets: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        created = secrets.init(directory)
    except OSError as exc:
        return cannot_start("secrets", exc)
    kept = [name for name in secrets.GENERATED if name not in created]
    print(f"secrets in {directory}: generated {', '.join(created) or 'none'}; "
          f"kept {', '.join(kept) or 'none'}")  # fmt: skip
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    """The schema at Alembic's head (compose's one-shot ``migrate``; ``alembic upgrade head``)."""

    from alembic import command
    from alembic.config import Config

    config = Config(str(Path(__file__).resolve().parents[1] / "alembic.ini"))
    try:
        command.upgrade(config, "head")
    except Exception as exc:  # the database unreachable, a bad URL, a failed migration
        return cannot_start("migrate", exc)
    print("database schema at head")
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The backend's processes and operations, as sub-commands (``inferscale`` adds its tools)."""
    secrets = sub.add_parser("secrets", help="generate (init) or print (show NAME) the secrets "
                             "in INFERSCALE_SECRETS_DIR")  # fmt: skip
    secrets.add_argument("action", choices=["init", "show"])
    secrets.add_argument("name", nargs="?", default="INFERSCALE_ADMIN_KEY")
    secrets.set_defaults(func=run_secrets)
    sub.add_parser("migrate", help="upgrade the database schema to head").set_defaults(
        func=run_migrate
    )
    sub.add_parser("api", help="serve the API (INFERSCALE_API_HOST/PORT)").set_defaults(
        func=run_api
    )
    sub.add_parser(
        "dashboard", help="serve the dashboard (INFERSCALE_DASHBOARD_PORT)"
    ).set_defaults(func=run_dashboard)


def main(argv: list[str] | None = None) -> int:
    """``python -m backend.cli``: the backend's own commands (``inferscale`` is the full CLI)."""
    parser = argparse.ArgumentParser(prog="python -m backend.cli")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
