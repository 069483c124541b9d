"""What every process of the project (the runtime, the API, the dashboard, the CLI) checks and
says when it starts, shared so they agree: whether a listening address is reachable only from
this host, and a refused settings object as one line."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether a listening address is reachable only from this host."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: assume it resolves to a reachable address


def settings_error(exc: BaseException) -> str | None:
    """A pydantic settings error as one line, each refused field and why; None for others."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return None
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        message = str(error.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "invalid settings: " + "; ".join(parts)
