#!/usr/bin/env bash
# One process of the platform, as `make <process>` and `make demo` start it, configured only by
# the settings' environment variables (README): runtime | api | worker | beat | dashboard.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
case "${1:-}" in
  runtime)   exec .venv/bin/python -m gpu_runtime serve ;;
  api)       exec .venv/bin/inferscale api ;;
  # The worker is a client of the runtime (no engine of its own): one job at a time keeps its
  # memory small; the runtime batches what several workers send.
  worker)    exec .venv/bin/python -m worker worker --loglevel=info --pool=solo \
               --concurrency=1 --queues=default,gpu --hostname="worker-$$@%h" ;;
  beat)      exec .venv/bin/python -m worker beat --loglevel=info \
               --schedule="${INFERSCALE_HOME:-$HOME/.cache/inferscale}/celerybeat-schedule" ;;
  dashboard) exec .venv/bin/inferscale dashboard ;;
  *) echo "usage: $0 runtime|api|worker|beat|dashboard" >&2; exit 2 ;;
esac
