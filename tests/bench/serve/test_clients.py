"""How a cell's users are dealt over client processes (``bench/serve/clients.py``). The
processes themselves run in the serve and peer harness tests, against real stacks."""

from __future__ import annotations

import pytest

from bench.serve.clients import ClientProcesses, split


def test_users_are_dealt_round_robin_and_every_user_runs_once() -> None:
    assert split(10, 4) == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    shares = split(100, 8)
    assert sorted(u for share in shares for u in share) == list(range(100))
    assert {len(share) for share in shares} == {12, 13}


def test_fewer_users_than_processes_leave_no_process_an_empty_share() -> None:
    assert split(2, 4) == [[0], [1]]


def test_one_client_process_is_the_bench_itself() -> None:
    with pytest.raises(ValueError, match="2 or more"):
        ClientProcesses(1)
