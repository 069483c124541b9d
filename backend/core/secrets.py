"""Generated secrets for deployments that start with none (docker compose's ``secrets`` service).

Each secret is a file named like its variable in ``INFERSCALE_SECRETS_DIR``, which every process's
settings read (a variable that is set wins). ``init`` writes the missing ones and never replaces a
file, so the secrets survive every restart and upgrade of the stack that keeps the volume.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

GENERATED = ("INFERSCALE_ADMIN_KEY", "INFERSCALE_KEY_PEPPER", "INFERSCALE_SERVICE_TOKEN")


def init(directory: Path) -> list[str]:
    """Creates each missing secret (readable by its owner only); returns the names created."""
    directory.mkdir(parents=True, exist_ok=True)
    created = []
    for name in GENERATED:
        path = directory / name
        if path.exists():
            continue
        staging = directory / f".{name}.{os.getpid()}.tmp"  # a crashed init's leftover is replaced
        staging.unlink(missing_ok=True)
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(staging, path)  # never over an existing file: a concurrent init's stands
            created.append(name)
        except FileExistsError:
            pass
        finally:
            staging.unlink()
    return created


def read(directory: Path, name: str) -> str:
    if name not in GENERATED:
        raise KeyError(f"not a generated secret: {name} (one of {', '.join(GENERATED)})")
    return (directory / name).read_text().strip()
