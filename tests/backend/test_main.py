"""The API process's start (``backend/main.py``)."""

from __future__ import annotations

import gc

import pytest
from fastapi.testclient import TestClient

from backend.core.config import get_settings
from backend.main import create_app


@pytest.mark.db
@pytest.mark.parametrize("freeze", [True, False])
def test_an_api_process_freezes_its_start_up_heap_out_of_full_collections(
    migrated_database: str, freeze: bool
) -> None:
    gc.unfreeze()
    settings = get_settings().model_copy(update={"gc_freeze_at_start": freeze})
    try:
        with TestClient(create_app(settings)):
            frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
    assert (frozen > 10_000) is freeze  # the API's imports alone are ~230,000 objects
