"""MiniLM's forward pass replayed from CUDA graphs: one launch instead of ~100 per query.

Eagerly, a query's forward pass is about a hundred small kernels, each launched from Python: on
the H200 that dispatch, not the arithmetic, was the embedding's time, and it held the runtime
process's GIL beside the engine's 100 output streams (docs/benchmarks.md, "Runs 5 and 6"). Here
each (batch, length) bucket is captured once at load; a call pads its token ids to the smallest
bucket that holds them and replays that graph. Padding is exact: padded positions are masked out
of attention and of the mean pool, padded rows are dropped. Shapes beyond the largest bucket run
eagerly. The graphs share one memory pool: replays never overlap (the embedder runs one pass at
a time) and each output is copied out before the next replay.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
LENGTH_BUCKETS = (16, 32, 64, 128)  # tokens; a question is 10-30

# (ids, attention mask, token types), each [B, L] int64 on the device -> [B, D] float32
Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def bucket(n: int, sizes: Sequence[int]) -> int | None:
    """The smallest of ``sizes`` (ascending) that holds ``n``, or None if none does."""
    i = bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    tokens: torch.Tensor  # [3, B, L] int64: ids, mask, types (the graph's static input)
    out: torch.Tensor  # [B, D] float32 (the graph's static output)
    host_tokens: torch.Tensor  # [3, B, L] int64, pinned: staged here, copied without a wait
    host_out: torch.Tensor  # [B, D] float32, pinned: the output lands here without a wait


@dataclass
class Launched:
    """A replay on its way: the output is in ``host_out`` once ``done``. Nothing else may be
    launched before it is done (the graphs share their memory and staging buffers)."""

    event: torch.cuda.Event
    host_out: torch.Tensor  # [B', D] float32, pinned
    rows: int

    def done(self) -> bool:
        return bool(self.event.query())  # type: ignore[no-untyped-call]

    def result(self) -> torch.Tensor:
        """[rows, D] float32 on the CPU (a copy: the staging buffer is reused)."""
        self.event.synchronize()
        return self.host_out[: self.rows].clone()


class GraphedForward:
    def __init__(
        self,
        forward: Forward,
        device: torch.device,
        pad_id: int,
        batches: Sequence[int] = BATCH_BUCKETS,
        lengths: Sequence[int] = LENGTH_BUCKETS,
    ) -> None:
        self.forward = forward
        self.device = device
        self.pad_id = pad_id
        self.batches, self.lengths = tuple(batches), tuple(lengths)
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[tuple[int, int], _Captured] = {}
        # Largest first: the shared pool is sized by it, and the smaller captures fit inside.
        for b in reversed(self.batches):
            for length in reversed(self.lengths):
                self._graphs[(b, length)] = self._capture(b, length)
        logger.info("query embedder: %d CUDA graphs captured", len(self._graphs))

    @property
    def count(self) -> int:
        return len(self._graphs)

    @torch.inference_mode()
    def _capture(self, b: int, length: int) -> _Captured:
        tokens = torch.zeros((3, b, length), dtype=torch.long, device=self.device)
        tokens[0].fill_(self.pad_id)
        side = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up off the capture: lazy inits, cuBLAS handles
            for _ in range(2):
                self.forward(tokens[0], tokens[1], tokens[2])
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            out = self.forward(tokens[0], tokens[1], tokens[2])  # [b, D]
        host_tokens = torch.empty(tokens.shape, dtype=torch.long, pin_memory=True)
        host_out = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        return _Captured(graph, tokens, out, host_tokens, host_out)

    @torch.inference_mode()
    def launch(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> Launched | None:
        """Start the pass for [B, L] CPU token tensors and return at once (the event loop
        polls ``done``: no thread, no wait on the device); None where no bucket holds them."""
        b, length = ids.shape
        shape = (bucket(b, self.batches), bucket(length, self.lengths))
        if shape[0] is None or shape[1] is None:
            return None
        captured = self._graphs[(shape[0], shape[1])]
        staged = captured.host_tokens  # [3, B', L'] pinned
        staged[0].fill_(self.pad_id)
        staged[1:].zero_()
        staged[0, :b, :length] = ids
        staged[1, :b, :length] = mask
        staged[2, :b, :length] = types
        captured.tokens.copy_(staged, non_blocking=True)  # one host-to-device copy of all three
        captured.graph.replay()
        captured.host_out.copy_(captured.out, non_blocking=True)  # [B', D]
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record()
        return Launched(event, captured.host_out, b)

    def __call__(
        self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor
    ) -> torch.Tensor | None:
        """[B, D] float32 on the CPU for [B, L] CPU token tensors; None where no bucket holds
        them (the caller runs the pass eagerly)."""
        launched = self.launch(ids, mask, types)
        return None if launched is None else launched.result()  # waits for the replay
