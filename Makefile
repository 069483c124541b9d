# Two commands a newcomer needs: `make demo` and `make test`. The rest are their building blocks.
.PHONY: setup services migrate demo test lint api worker beat dashboard bench

setup:
	bash scripts/setup.sh

services:
	bash scripts/ensure_services.sh

migrate: setup services
	.venv/bin/alembic upgrade head

demo: setup services migrate
	bash scripts/demo.sh

test: setup services
	bash scripts/test.sh

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy gpu_runtime backend worker dashboard

api:
	.venv/bin/uvicorn backend.main:app --host 127.0.0.1 --port 8000

worker:
	.venv/bin/celery -A worker.celery_app worker --loglevel=info --queues=default,gpu

beat:
	.venv/bin/celery -A worker.celery_app beat --loglevel=info

bench:
	bash -c 'source scripts/env.sh && .venv/bin/inferscale bench --out runs/bench'

dashboard:
	.venv/bin/streamlit run dashboard/streamlit_app.py
