"""``inferscale``: ``api``, ``dashboard``, ``migrate``, ``secrets`` (the backend's), and the tools:
``demo-platform``, ``bench`` (its own parsers: ``inferscale bench --help``, ``bench serve``,
``bench capacity``) and ``eval`` (``inferscale eval locomo --help``)."""

from __future__ import annotations

import argparse
import sys

from backend.cli import add_commands


def run_platform_demo(args: argparse.Namespace) -> int:
    from backend.core.config import get_settings
    from inferscale.demo import run

    settings = get_settings()
    api = args.api or f"http://127.0.0.1:{settings.api_port}"
    dashboard = f"http://127.0.0.1:{settings.dashboard_port}"
    run(api, settings.admin_api_key, args.questions, dashboard)
    return 0


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["bench"]:  # its own parsers: ``inferscale bench --help``
        from bench.__main__ import main as bench

        return bench(args_in[1:])
    if args_in[:1] == ["eval"]:  # its own parser: ``inferscale eval locomo --help``
        from evals.__main__ import main as evaluate

        return evaluate(args_in[1:])
    parser = argparse.ArgumentParser(prog="inferscale")
    sub = parser.add_subparsers(dest="command", required=True)
    add_commands(sub)
    platform = sub.add_parser(
        "demo-platform", help="drive a running API + worker: import, encode, chat (kv vs prompt)"
    )
    platform.add_argument("--api", help="default: http://127.0.0.1:INFERSCALE_API_PORT")
    platform.add_argument("--questions", type=int, default=3)
    platform.set_defaults(func=run_platform_demo)
    sub.add_parser("bench", help="benchmarks (see `inferscale bench --help`)")
    sub.add_parser("eval", help="quality evaluations (see `inferscale eval locomo --help`)")
    args = parser.parse_args(args_in)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
