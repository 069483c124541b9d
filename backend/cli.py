"""``inferscale`` command line: ``inferscale demo`` runs the platform end to end on the defaults."""

from __future__ import annotations

import argparse
import sys
import time
import uuid


def _step(message: str) -> None:
    print(f"==> {message}", flush=True)


def run_demo(args: argparse.Namespace) -> int:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from backend.db.session import get_engine
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.engine import ChatMessage, build_llm, greedy_chat

    _step("applying database migrations")
    command.upgrade(Config("alembic.ini"), "head")
    with get_engine().connect() as conn:
        revision = conn.execute(text("select version_num from alembic_version")).scalar_one()
    print(f"    database at revision {revision}")

    if not args.skip_worker:
        from worker.tasks import ping

        _step("round trip through Redis to a Celery worker")
        token = uuid.uuid4().hex
        reply = ping.delay(token).get(timeout=60)
        assert reply["token"] == token, reply
        print(f"    worker {reply['worker']} answered")

    _step("starting vLLM with SmolLM2-135M-Instruct (CPU)")
    started = time.perf_counter()
    llm = build_llm(RuntimeSettings())
    print(f"    engine ready in {time.perf_counter() - started:.1f}s")
    messages = [
        ChatMessage("system", "Facts about the user: the user's dog is named Biscuit."),
        ChatMessage("user", "What is my dog's name?"),
    ]
    _step(f"chat: {messages[-1].content}")
    answer = greedy_chat(llm, messages)
    print(f"    SmolLM2: {answer.strip()}")
    return 0


def run_platform_demo(args: argparse.Namespace) -> int:
    from backend.core.config import get_settings
    from backend.demo import run

    run(args.api, get_settings().admin_api_key, args.questions)
    return 0


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["bench"]:  # its own parser: ``inferscale bench --help``
        from gpu_runtime.bench.__main__ import main as bench

        return bench(args_in[1:])
    if args_in[:1] == ["eval"]:  # its own parser: ``inferscale eval locomo --help``
        from backend.evaluation.__main__ import main as evaluate

        return evaluate(args_in[1:])
    parser = argparse.ArgumentParser(prog="inferscale")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the platform end to end on the embedded defaults")
    demo.add_argument("--skip-worker", action="store_true", help="do not ping a Celery worker")
    demo.set_defaults(func=run_demo)
    platform = sub.add_parser(
        "demo-platform", help="drive a running API + worker: import, encode, chat (kv vs prompt)"
    )
    platform.add_argument("--api", default="http://127.0.0.1:8000")
    platform.add_argument("--questions", type=int, default=3)
    platform.set_defaults(func=run_platform_demo)
    sub.add_parser("bench", help="TTFT / throughput benchmarks (see `inferscale bench --help`)")
    sub.add_parser("eval", help="quality evaluations (see `inferscale eval locomo --help`)")
    args = parser.parse_args(args_in)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
