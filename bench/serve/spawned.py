"""Helper processes a bench drives over pipes, and how it deals users among them.

``bench serve``/``bench peer`` (``clients.py``) and ``bench fairness`` (``flood.py``) both drive
their users from spawned processes, so that the load generator is not the bound; this is the
part they share: start, one message to each, every answer back (an exception a process sends
is raised here), and a clean stop.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any


def split(users: int, processes: int) -> list[list[int]]:
    """User ids 0..users-1 dealt round-robin over the processes (none left empty)."""
    shares = [list(range(p, users, processes)) for p in range(processes)]
    return [share for share in shares if share]


class Spawned:
    """One spawned process per entry of ``args``, each running ``target(conn, *its args)``
    with ``conn`` its end of a pipe to us."""

    def __init__(self, target: Callable[..., None], args: Sequence[tuple[Any, ...]]) -> None:
        context = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for extra in args:
            ours, theirs = context.Pipe()
            proc = context.Process(target=target, args=(theirs, *extra), daemon=True)
            proc.start()
            self._conns.append(ours)
            self._procs.append(proc)

    def send(self, messages: Sequence[Any]) -> None:
        """``messages[i]`` to process i (the first ``len(messages)`` processes)."""
        for conn, message in zip(self._conns, messages, strict=False):
            conn.send(message)

    def send_all(self, message: Any) -> None:
        self.send([message] * len(self._conns))

    def replies(self, timeout_s: float, count: int | None = None) -> list[Any]:
        """One answer from each of the first ``count`` processes (all by default), in order."""
        answers = []
        for conn in self._conns[:count]:
            if not conn.poll(timeout_s):
                raise TimeoutError("a spawned bench process did not answer")
            answer = conn.recv()
            if isinstance(answer, Exception):
                raise answer
            answers.append(answer)
        return answers

    def close(self, farewell: Any) -> None:
        """Sends ``farewell`` (which ends each process's loop) and reaps them."""
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(farewell)
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        self._conns, self._procs = [], []
