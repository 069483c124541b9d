"""The API process's start (``backend/main.py``)."""

from __future__ import annotations

import sys

import pytest
from fastapi.testclient import TestClient

from backend.core.config import get_settings
from backend.main import create_app


@pytest.mark.db
def test_each_api_process_sets_the_gil_switch_interval_of_its_settings(
    migrated_database: str,
) -> None:
    before = sys.getswitchinterval()
    settings = get_settings().model_copy(update={"gil_switch_interval_ms": 0.5})
    try:
        with TestClient(create_app(settings)):
            assert sys.getswitchinterval() == pytest.approx(0.0005)
    finally:
        sys.setswitchinterval(before)
