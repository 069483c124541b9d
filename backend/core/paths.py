"""Where shared data lives: LoCoMo conversations (``INFERSCALE_LOCOMO_DIR`` overrides)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def locomo_dir() -> Path:
    configured = os.environ.get("INFERSCALE_LOCOMO_DIR")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "data" / "locomo"
