"""SlabArena: a fact's bytes come back exactly, from one run of slabs or from scattered ones, and
as a copy (the caller's pin ends before it uses them)."""

from __future__ import annotations

import pytest
import torch

from gpu_runtime.pool.arena import SlabArena

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("slabs", [(2, 3, 4), (5, 1, 3), (7,)])
def test_read_returns_the_written_bytes_as_a_copy(slabs: tuple[int, ...]) -> None:
    arena = SlabArena(8, 64, torch.device("cpu"), pinned=False)
    arena.data.fill_(0xAB)
    blob = torch.randint(0, 255, (len(slabs) * 64 - 13,), dtype=torch.uint8)
    arena.write(slabs, blob)

    read = arena.read(slabs, blob.numel())
    assert torch.equal(read, blob)
    arena.data.zero_()  # the slabs reused by another fact
    assert torch.equal(read, blob)
