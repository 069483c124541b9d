"""Where data lives: the LoCoMo conversations in the repository (``INFERSCALE_LOCOMO_DIR``
points elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def locomo_dir() -> Path:
    configured = os.environ.get("INFERSCALE_LOCOMO_DIR")
    return Path(configured) if configured else REPO_ROOT / "data" / "locomo"
