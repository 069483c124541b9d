#!/usr/bin/env bash
# The whole platform on the embedded defaults, natively: the runtime service (vLLM-CPU,
# SmolLM2), the API, a Celery worker and beat, the dashboard; then the demo imports a LoCoMo
# conversation and asks some of its questions in kv and prompt modes side by side. Ctrl-C (or the
# end of the demo, unless INFERSCALE_DEMO_KEEP=1) stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
logs=${INFERSCALE_LOG_DIR:-/tmp/inferscale-demo}
mkdir -p "$logs"
export INFERSCALE_RUNTIME_PORT=${INFERSCALE_RUNTIME_PORT:-8100}
export INFERSCALE_API_PORT=${INFERSCALE_API_PORT:-8000}
export INFERSCALE_DASHBOARD_PORT=${INFERSCALE_DASHBOARD_PORT:-8501}
export INFERSCALE_RUNTIME_URL=${INFERSCALE_RUNTIME_URL:-http://127.0.0.1:$INFERSCALE_RUNTIME_PORT}
export INFERSCALE_API_URL=http://127.0.0.1:$INFERSCALE_API_PORT

# The schema first (idempotent), so `bash scripts/demo.sh` alone works on a database that
# exists; `make demo` also starts local Postgres and Redis and creates the database.
.venv/bin/inferscale migrate >"$logs/migrate.log" 2>&1 || {
  echo "!! the database schema could not be migrated (log: $logs/migrate.log): is Postgres up" \
    "and the database created? \`make demo\` starts both" >&2
  tail -5 "$logs/migrate.log" >&2
  exit 1
}
echo "--> database schema at head"

pids=()
cleanup() { trap - EXIT INT TERM; kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
start() {  # start <process>: in the background, logging to $logs/<process>.log
  bash scripts/run.sh "$1" >"$logs/$1.log" 2>&1 &
  pids+=($!)
  echo "--> $1 started (log: $logs/$1.log)"
}

start runtime
start worker
start beat
start api
start dashboard
echo "--> waiting for the runtime's engine (about a minute on 2 cores)"
for _ in $(seq 600); do
  curl -sf "$INFERSCALE_RUNTIME_URL/readyz" >/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "!! the runtime exited: see $logs/runtime.log" >&2; exit 1; }
  sleep 1
done

.venv/bin/inferscale demo-platform --api "$INFERSCALE_API_URL" "$@"
if [ "${INFERSCALE_DEMO_KEEP:-0}" = 1 ]; then
  echo "--> still running (dashboard http://127.0.0.1:$INFERSCALE_DASHBOARD_PORT); Ctrl-C stops it all"
  wait
fi
