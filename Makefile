# Two commands a newcomer needs: `make demo` and `make test`. The rest are their building blocks.
.PHONY: setup services migrate demo test lint runtime api worker beat dashboard bench \
	compose-test compose-gpu-build

setup:
	bash scripts/setup.sh

services:
	bash scripts/ensure_services.sh

migrate: setup services
	.venv/bin/alembic upgrade head

demo: setup services migrate
	bash scripts/demo.sh

test: setup
	INFERSCALE_NEED_BROWSER=1 bash scripts/ensure_services.sh
	bash scripts/test.sh

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy .

runtime:
	bash scripts/run.sh runtime

api:
	bash scripts/run.sh api

worker:
	bash scripts/run.sh worker

beat:
	bash scripts/run.sh beat

bench:
	bash -c 'source scripts/env.sh && .venv/bin/inferscale bench --out runs/bench'

dashboard:
	bash scripts/run.sh dashboard

# docker-compose.yml for real: the CPU profile built, started, driven from outside and broken on
# purpose (scripts/compose/test.sh; starts a private Docker engine when none answers).
compose-test: setup
	bash scripts/compose/test.sh

# The GPU runtime's image (large: CUDA torch and vLLM); no GPU is needed to build it.
compose-gpu-build: setup
	bash scripts/compose/build_gpu.sh
