#!/usr/bin/env bash
# Lint, type-check, then the whole pytest suite (unit, db, broker, engine) against real services.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
echo "--> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "--> mypy"
.venv/bin/mypy .
echo "--> pytest"
# A hung test fails on its own instead of holding CI until its limit.
.venv/bin/python -m pytest --timeout=1200 --durations=25 "$@"
