"""``inferscale secrets init``: generates what is missing, never replaces a secret, readable by
its owner only; ``show`` prints one."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from backend.core import secrets

pytestmark = pytest.mark.unit


def test_init_generates_each_secret_once_and_keeps_it(tmp_path: Path) -> None:
    assert secrets.init(tmp_path) == list(secrets.GENERATED)
    first = {name: secrets.read(tmp_path, name) for name in secrets.GENERATED}
    assert len(set(first.values())) == 3 and all(len(v) >= 40 for v in first.values())
    (tmp_path / "INFERSCALE_KEY_PEPPER").unlink()  # one lost: only it is made again
    assert secrets.init(tmp_path) == ["INFERSCALE_KEY_PEPPER"]
    assert secrets.read(tmp_path, "INFERSCALE_ADMIN_KEY") == first["INFERSCALE_ADMIN_KEY"]
    assert secrets.read(tmp_path, "INFERSCALE_KEY_PEPPER") != first["INFERSCALE_KEY_PEPPER"]
    for name in secrets.GENERATED:
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o400
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(secrets.GENERATED)  # no leftovers


def test_an_existing_secret_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "INFERSCALE_ADMIN_KEY").write_text("operator-chosen\n")
    assert "INFERSCALE_ADMIN_KEY" not in secrets.init(tmp_path)
    assert secrets.read(tmp_path, "INFERSCALE_ADMIN_KEY") == "operator-chosen"
    with pytest.raises(KeyError):
        secrets.read(tmp_path, "DATABASE_URL")  # only the generated ones are shown


def test_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "INFERSCALE_SECRETS_DIR": str(tmp_path / "s")}
    cli = [sys.executable, "-m", "backend.cli", "secrets"]
    made = subprocess.run([*cli, "init"], env=env, capture_output=True, text=True, check=True)
    assert "generated INFERSCALE_ADMIN_KEY" in made.stdout
    again = subprocess.run([*cli, "init"], env=env, capture_output=True, text=True, check=True)
    assert "generated none" in again.stdout
    shown = subprocess.run([*cli, "show"], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == secrets.read(tmp_path / "s", "INFERSCALE_ADMIN_KEY")
    unset = {k: v for k, v in env.items() if k != "INFERSCALE_SECRETS_DIR"}
    refused = subprocess.run([*cli, "init"], env=unset, capture_output=True, text=True)
    assert refused.returncode == 2 and "INFERSCALE_SECRETS_DIR is not set" in refused.stderr
