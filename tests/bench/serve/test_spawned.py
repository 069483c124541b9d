"""How users are dealt over a bench's processes, and the processes' pipe protocol
(``bench/serve/spawned.py``), with real spawned processes."""

from __future__ import annotations

from multiprocessing.connection import Connection

import pytest

from bench.serve.spawned import Spawned, split


def _echo(conn: Connection, tag: str) -> None:
    """A helper process: answers each message with its tag, raises on "fail", ends on None."""
    while (message := conn.recv()) is not None:
        if message == "fail":
            conn.send(ValueError(f"{tag} was told to fail"))
        elif message != "mute":
            conn.send(f"{tag}:{message}")


def test_users_are_dealt_round_robin_and_every_user_runs_once() -> None:
    assert split(10, 4) == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    shares = split(100, 8)
    assert sorted(u for share in shares for u in share) == list(range(100))
    assert {len(share) for share in shares} == {12, 13}


def test_fewer_users_than_processes_leave_no_process_an_empty_share() -> None:
    assert split(2, 4) == [[0], [1]]


def test_each_process_answers_its_own_message_and_failures_come_back_as_errors() -> None:
    spawned = Spawned(_echo, [("a",), ("b",), ("c",)])
    try:
        spawned.send(["x", "y"])  # only the first two are asked
        assert spawned.replies(60, count=2) == ["a:x", "b:y"]
        spawned.send_all("z")
        assert spawned.replies(60) == ["a:z", "b:z", "c:z"]
        spawned.send(["fail"])
        with pytest.raises(ValueError, match="a was told to fail"):
            spawned.replies(60, count=1)
        spawned.send(["mute"])
        with pytest.raises(TimeoutError, match="did not answer"):
            spawned.replies(0.5, count=1)
    finally:
        spawned.close(None)
    assert spawned.replies(1) == []  # closed: nothing left to ask
