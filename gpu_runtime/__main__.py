"""``python -m gpu_runtime serve``: the runtime service, one process per GPU.

Address, model, budgets and the service token come from ``RuntimeSettings`` (``INFERSCALE_*``).
"""

from __future__ import annotations

import argparse
import logging


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

    settings = RuntimeSettings()
    configure_vllm_environment(settings)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    app = create_app(settings)
    uvicorn.run(
        app,
        host=args.host or settings.runtime_host,
        port=args.port or settings.runtime_port,
        log_level=args.log_level,
        access_log=False,  # a line per request of every stream; Prometheus counts them
        # Longer than clients keep idle connections (RuntimeClient: 30 s), so the client closes
        # first: a connection the server dropped is never reused for a request.
        timeout_keep_alive=75,
        timeout_graceful_shutdown=10,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
