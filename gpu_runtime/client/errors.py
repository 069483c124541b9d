"""What the runtime's client raises: one base class, ``code`` the runtime's error code."""

from __future__ import annotations


class RuntimeClientError(Exception):
    """Base class of what the client raises; ``code`` is the runtime's error code."""

    def __init__(self, message: str, code: str = "runtime_error", status: int | None = None):
        super().__init__(message)
        self.message, self.code, self.status = message, code, status


class RuntimeUnavailableError(RuntimeClientError):
    """The runtime cannot be reached, is still starting, or its engine stopped."""


class RuntimeNotListeningError(RuntimeUnavailableError):
    """Nothing accepts connections at the runtime's address (refused, or its name does not
    resolve): no runtime process runs there, so none holds any KV in memory."""


class RuntimeRejectedError(RuntimeClientError):
    """The runtime refused the request (4xx): the message says why."""


class RuntimeStreamError(RuntimeClientError):
    """A stream the runtime ended with an error event (or that broke off)."""
