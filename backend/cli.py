"""``inferscale`` command line: the platform demo's client, benchmarks and evaluations."""

from __future__ import annotations

import argparse
import sys


def run_api(args: argparse.Namespace) -> int:
    """The API on ``INFERSCALE_API_HOST``/``PORT``."""
    import uvicorn

    from backend.core.config import get_settings

    settings = get_settings()
    # Keep-alive longer than clients' pools keep idle connections (aiohttp 15 s, httpx 5 s): a
    # connection the server dropped must never be picked for the client's next request.
    uvicorn.run("backend.main:app", host=settings.api_host, port=settings.api_port,
                log_level="info", timeout_keep_alive=75)  # fmt: skip
    return 0


def run_dashboard(args: argparse.Namespace) -> int:
    """The operator dashboard on ``INFERSCALE_DASHBOARD_PORT`` (Streamlit, headless)."""
    import os
    from pathlib import Path

    from backend.core.config import get_settings

    settings = get_settings()
    os.environ.setdefault("INFERSCALE_API_URL", f"http://127.0.0.1:{settings.api_port}")
    if settings.environment != "prod":  # dev and demo: the operator is logged in already
        os.environ.setdefault("INFERSCALE_ADMIN_KEY", settings.admin_api_key)
    app = Path(__file__).resolve().parents[1] / "dashboard" / "streamlit_app.py"
    os.execvp(
        sys.executable,
        [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless=true",
         f"--server.port={settings.dashboard_port}", "--browser.gatherUsageStats=false",
         "--client.toolbarMode=viewer"],
    )  # fmt: skip


def run_platform_demo(args: argparse.Namespace) -> int:
    from backend.core.config import get_settings
    from backend.demo import run

    settings = get_settings()
    api = args.api or f"http://127.0.0.1:{settings.api_port}"
    dashboard = f"http://127.0.0.1:{settings.dashboard_port}"
    run(api, settings.admin_api_key, args.questions, dashboard)
    return 0


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:2] == ["bench", "serve"]:  # through the API: ``inferscale bench serve --help``
        from backend.bench.__main__ import main as serve

        return serve(args_in[2:])
    if args_in[:1] == ["bench"]:  # its own parser: ``inferscale bench --help``
        from gpu_runtime.bench.__main__ import main as bench

        return bench(args_in[1:])
    if args_in[:1] == ["eval"]:  # its own parser: ``inferscale eval locomo --help``
        from backend.evaluation.__main__ import main as evaluate

        return evaluate(args_in[1:])
    parser = argparse.ArgumentParser(prog="inferscale")
    sub = parser.add_subparsers(dest="command", required=True)
    platform = sub.add_parser(
        "demo-platform", help="drive a running API + worker: import, encode, chat (kv vs prompt)"
    )
    platform.add_argument("--api", help="default: http://127.0.0.1:INFERSCALE_API_PORT")
    platform.add_argument("--questions", type=int, default=3)
    platform.set_defaults(func=run_platform_demo)
    sub.add_parser("api", help="serve the API (INFERSCALE_API_HOST/PORT)").set_defaults(
        func=run_api
    )
    sub.add_parser(
        "dashboard", help="serve the dashboard (INFERSCALE_DASHBOARD_PORT)"
    ).set_defaults(func=run_dashboard)
    sub.add_parser("bench", help="TTFT / throughput benchmarks (see `inferscale bench --help`)")
    sub.add_parser("eval", help="quality evaluations (see `inferscale eval locomo --help`)")
    args = parser.parse_args(args_in)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
