"""The runtime's engine code imports no web, database or queue code, and its client subpackage
(what the backend and the workers import) no torch or vLLM."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

SERVICE_STACK = ("sqlalchemy", "celery", "fastapi", "psycopg", "redis", "streamlit", "vllm")
ENGINE_STACK = ("torch", "vllm", "transformers", "triton")


def _loaded(modules: str, forbidden: tuple[str, ...]) -> str:
    probe = f"import sys, {modules}\nprint(','.join(m for m in {forbidden!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_engine_modules_import_without_the_service_stack() -> None:
    modules = (
        "gpu_runtime, gpu_runtime.config, gpu_runtime.engine, gpu_runtime.errors, "
        "gpu_runtime.model_assets, gpu_runtime.connector.worker, gpu_runtime.pool.tensors"
    )
    assert _loaded(modules, SERVICE_STACK) == ""


def test_the_client_subpackage_imports_without_the_engine_stack() -> None:
    modules = (
        "gpu_runtime.types, gpu_runtime.client.protocol, gpu_runtime.client.http, "
        "gpu_runtime.client.composer, gpu_runtime.client.launch, gpu_runtime.client.tokenizer, "
        "gpu_runtime.client.replicas"
    )
    assert _loaded(modules, ENGINE_STACK) == ""
