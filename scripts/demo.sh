#!/usr/bin/env bash
# The main job on the embedded defaults: a Celery worker and the API (uvicorn) against the local
# Postgres/Redis, then the platform demo drives them through HTTP and the OpenAI SDK.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
logs=${INFERSCALE_LOG_DIR:-/tmp/inferscale-demo}
mkdir -p "$logs"
port=${INFERSCALE_PORT:-8000}

echo "--> starting a Celery worker (log: $logs/worker.log)"
.venv/bin/celery -A worker.celery_app worker --loglevel=info --concurrency=1 --pool=solo \
  --queues=default,gpu --hostname="demo@%h" >"$logs/worker.log" 2>&1 &
worker_pid=$!
echo "--> starting the API on 127.0.0.1:$port (log: $logs/api.log)"
.venv/bin/uvicorn backend.main:app --host 127.0.0.1 --port "$port" >"$logs/api.log" 2>&1 &
api_pid=$!
trap 'kill $worker_pid $api_pid 2>/dev/null || true; wait 2>/dev/null || true' EXIT

.venv/bin/inferscale demo-platform --api "http://127.0.0.1:$port" "$@"
