"""Client processes (``bench/serve/clients.py``). The processes themselves run in the serve
and peer harness tests, against real stacks."""

from __future__ import annotations

import pytest

from bench.serve.clients import ClientProcesses


def test_one_client_process_is_the_bench_itself() -> None:
    with pytest.raises(ValueError, match="2 or more"):
        ClientProcesses(1)
