#!/usr/bin/env bash
# make compose-test: docker-compose.yml's CPU profile for real. A Docker engine (the one that
# answers, or a private one: scripts/compose/docker.sh), the base images (pulled, or local
# stand-ins where no registry answers), the images built, the stack `up --wait`ed, then driven
# from outside the containers by tests/deploy/test_compose_stack.py: the official Mem0 and OpenAI
# SDKs, the dashboard in a browser, a user's deletion, and four faults (the runtime and the worker
# killed, Postgres stopped, Redis restarted). Everything is torn down at the end, whatever
# happened: containers, volumes and the engine it started (images stay cached for the next run).
# Each step has its own time limit, so a hang fails with a log instead of holding CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/compose/docker.sh
started=$(date +%s)
project=${INFERSCALE_COMPOSE_PROJECT:-inferscale-ci}
logs=${INFERSCALE_COMPOSE_LOGS:-/tmp/inferscale-compose-test}
mkdir -p "$logs"

# The stack under test: the user's files plus one override (build steps on the host network);
# its ports away from a developer's own stack; a short job-stall window so that the killed
# worker's job comes back within the test (production default: 120 s).
export COMPOSE_PROJECT_NAME=$project
export INFERSCALE_API_PORT=${INFERSCALE_COMPOSE_API_PORT:-28000}
export INFERSCALE_DASHBOARD_PORT=${INFERSCALE_COMPOSE_DASHBOARD_PORT:-28501}
export INFERSCALE_JOB_STALL_S=20
unset INFERSCALE_ADMIN_KEY INFERSCALE_KEY_PEPPER INFERSCALE_SERVICE_TOKEN INFERSCALE_PUBLISH_ADDR

elapsed() { echo "$(( $(date +%s) - started ))s"; }
step() {  # step <limit in seconds> <what> <command...>: timed, logged, bounded
  local limit=$1 what=$2; shift 2
  say "[$(elapsed)] $what"
  local t0=$SECONDS
  if ! timeout "$limit" "$@"; then
    say "!! $what failed or passed its ${limit}s limit"
    return 1
  fi
  say "[$(elapsed)] $what: done in $(( SECONDS - t0 ))s"
}

teardown() {
  local code=$?
  set +e
  if [ -n "${compose_cmd:-}" ]; then
    if [ "$code" != 0 ]; then
      say "the stack's state and the last lines of each service's log ($logs/compose.log):"
      timeout 60 $compose_cmd ps -a
      timeout 120 $compose_cmd logs --no-color --timestamps >"$logs/compose.log" 2>&1
      timeout 60 $compose_cmd logs --no-color --tail 40
    fi
    say "[$(elapsed)] tearing down: containers, networks and volumes of $project"
    timeout 300 $compose_cmd down --volumes --remove-orphans --timeout 20
    timeout 120 docker image prune -f >/dev/null
  fi
  engine_down
  say "compose test $([ "$code" = 0 ] && echo passed || echo FAILED) in $(elapsed)"
  exit "$code"
}
trap teardown EXIT

# (engine_up and base_images bound each of their own commands: they must set this shell's
# DOCKER_HOST, so they cannot run under `timeout`.)
say "[$(elapsed)] docker engine"; engine_up
compose_cmd="$(compose_binary) -f docker-compose.yml -f scripts/compose/ci.override.yml --profile cpu"
say "[$(elapsed)] base images"; base_images
# A stack left by an interrupted run goes first (its volumes too).
timeout 300 $compose_cmd down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || true
step 2400 "build the CPU profile's images" $compose_cmd build
docker image ls --format '    {{.Repository}}:{{.Tag}}  {{.Size}}  created {{.CreatedSince}}' \
  | grep -E 'inferscale|python|postgres|redis' || true
step 1200 "up --wait (every service healthy)" $compose_cmd up --detach --wait --wait-timeout 1100
timeout 60 $compose_cmd ps --format '    {{.Service}}: {{.Status}}'

# What the tests drive: the compose command, the environment it needs, the published URLs.
stack=$logs/stack.json
python3 - "$stack" $compose_cmd <<'EOF'
import json, os, sys
env = {k: v for k, v in os.environ.items()
       if k in ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "COMPOSE_PROJECT_NAME")
       or k in ("INFERSCALE_API_PORT", "INFERSCALE_DASHBOARD_PORT", "INFERSCALE_JOB_STALL_S")}
json.dump({"compose": sys.argv[2:], "env": env,
           "api": f"http://127.0.0.1:{env['INFERSCALE_API_PORT']}",
           "dashboard": f"http://127.0.0.1:{env['INFERSCALE_DASHBOARD_PORT']}",
           "ports": [int(env["INFERSCALE_API_PORT"]), int(env["INFERSCALE_DASHBOARD_PORT"])]},
          open(sys.argv[1], "w"))
EOF
step 1500 "drive the stack from outside: SDKs, dashboard, deletion, faults" \
  env INFERSCALE_COMPOSE_STACK="$stack" .venv/bin/python -m pytest -p no:cacheprovider -m compose \
  tests/deploy/test_compose_stack.py -v -s --durations=0 --timeout=600 -o addopts="--strict-markers"
