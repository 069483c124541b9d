"""The GPU runtime must import without the web/DB/queue stack (it runs in its own process)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

FORBIDDEN = ("sqlalchemy", "celery", "fastapi", "psycopg", "redis", "streamlit", "vllm")


def test_gpu_runtime_imports_without_service_stack() -> None:
    probe = (
        "import sys, gpu_runtime, gpu_runtime.config, gpu_runtime.engine, gpu_runtime.errors, "
        "gpu_runtime.model_assets\n"
        f"loaded = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        "print(','.join(loaded))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"gpu_runtime pulled in: {result.stdout.strip()}"
