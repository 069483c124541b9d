#!/usr/bin/env bash
# A fresh API's first concurrent requests, three restarts: bench/serve/cold_start.py against the
# API of the checkout REPO (4 processes, no runtime, its own database), e.g. two commits side by
# side:  bash bench/serve/cold_start.sh /path/to/checkout LABEL > OUT.jsonl
set -u
repo=$1 label=$2 here=$(cd "$(dirname "$0")/../.." && pwd)
py=$here/.venv/bin/python
export DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/inferscale_cold_start
export INFERSCALE_RUNTIME_URL=http://127.0.0.1:8999 INFERSCALE_API_PORT=8300 INFERSCALE_API_WORKERS=4
export INFERSCALE_ADMIN_KEY=cold-admin-key-0123456789abcdef HF_HUB_OFFLINE=1
psql -h 127.0.0.1 -U postgres -qc "drop database if exists inferscale_cold_start" \
  -c "create database inferscale_cold_start" >/dev/null
(cd "$here" && .venv/bin/alembic upgrade head >/dev/null 2>&1) || { echo "migrations failed" >&2; exit 1; }
up() {
  cd "$repo" || exit 1
  setsid "$py" -m inferscale.cli api >"/tmp/cold-start-api-$label.log" 2>&1 &
  echo $! >/tmp/cold-start-api.pid
  cd "$here" || exit 1
  for _ in $(seq 120); do curl -so /dev/null http://127.0.0.1:8300/healthz && break; sleep 0.5; done
  sleep 3  # the same pause for every checkout
}
down() {
  kill -- -"$(cat /tmp/cold-start-api.pid)" 2>/dev/null
  for _ in $(seq 40); do curl -so /dev/null http://127.0.0.1:8300/healthz || return 0; sleep 0.5; done
  echo "the API did not stop" >&2; exit 1
}
bench=("$py" -m bench.serve.cold_start --api http://127.0.0.1:8300 --admin-key "$INFERSCALE_ADMIN_KEY")
up && (cd "$here" && "${bench[@]}" setup) && down
for i in 1 2 3; do up; (cd "$here" && "${bench[@]}" fire --label "$label-$i"); down; done
