#!/usr/bin/env bash
# The main job on the embedded defaults: services, migrations, a Celery worker, a real SmolLM2 chat.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
source scripts/env.sh

echo "--> starting a Celery worker"
.venv/bin/celery -A worker.celery_app worker --loglevel=warning --concurrency=1 \
  --queues=default,gpu --hostname="demo@%h" >/tmp/inferscale-demo-worker.log 2>&1 &
worker_pid=$!
trap 'kill $worker_pid 2>/dev/null || true' EXIT

.venv/bin/inferscale demo "$@"
