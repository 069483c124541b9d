"""``python -m gpu_runtime serve``: the runtime service, one process per GPU.

Address, model, budgets and the service token come from ``RuntimeSettings`` (``INFERSCALE_*``).
A runtime that cannot serve exits non-zero with a one-line reason on stderr: bad settings, a
placeholder token on a reachable address, missing model files, an engine that did not start or
that died (so a supervisor restarts it, and never mistakes a crash for a clean stop).
"""

from __future__ import annotations

import argparse
import logging
import sys

EXIT_CANNOT_START = 2
EXIT_ENGINE_FAILED = 1


def one_line(exc: BaseException) -> str:
    """An error as one line: a settings error lists each refused field and why."""
    from gpu_runtime.client.startup import settings_error

    return settings_error(exc) or " ".join(f"{type(exc).__name__}: {exc}".split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the internal API (INFERSCALE_RUNTIME_HOST/PORT)")
    serve.add_argument("--host", help="default: INFERSCALE_RUNTIME_HOST")
    serve.add_argument("--port", type=int, help="default: INFERSCALE_RUNTIME_PORT")
    serve.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)

    import uvicorn

    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.engine import configure_vllm_environment
    from gpu_runtime.server.app import create_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        settings = RuntimeSettings()
        host, port = args.host or settings.runtime_host, args.port or settings.runtime_port
        settings.refuse_exposed_placeholder(host)
        configure_vllm_environment(settings)
        app = create_app(settings)
    except Exception as exc:
        print(f"gpu_runtime: cannot start: {one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_START
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=args.log_level,
            access_log=False,  # a line per request of every stream; Prometheus counts them
            # Longer than clients keep idle connections (RuntimeClient: 30 s), so the client
            # closes first: a connection the server dropped is never reused for a request.
            timeout_keep_alive=75,
            timeout_graceful_shutdown=10,
        )
    )
    app.state.server.stop_server = lambda: setattr(server, "should_exit", True)
    server.run()
    if failure := app.state.server.failure:  # the engine did not start, or died
        print(f"gpu_runtime: {failure}", file=sys.stderr, flush=True)
        return EXIT_ENGINE_FAILED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
