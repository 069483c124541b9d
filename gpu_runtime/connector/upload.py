"""PlanUpload: a step's int64 tables from the host to the device in one copy.

Each part starts 16-byte aligned: Triton specialises pointers on alignment, and varying it would
compile new kernel variants mid-serving. On CUDA the copy goes through one reused pinned buffer
(pinning afresh every step costs more than the whole plan), which a step may overwrite only once
the last copy out of it has run: the last step's ``done`` event, recorded after that copy, says
so (long finished by then: its step has completed since).
"""

from __future__ import annotations

import numpy as np
import torch

from gpu_runtime.kernels import inject


class PlanUpload:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._cuda = device.type == "cuda"
        self._staging: torch.Tensor | None = None  # [capacity] int64, pinned
        self.last_done: torch.cuda.Event | None = None  # the last step's reads, all enqueued

    def __call__(self, parts: list[np.ndarray]) -> tuple[torch.Tensor, list[int]]:
        """``parts`` (int64, 1-D) in one device tensor; where each starts in it."""
        offsets, total = [], 0
        for part in parts:
            offsets.append(total)
            total += len(part) + len(part) % 2
        if not self._cuda:
            flat = np.zeros(total, dtype=np.int64)
            for part, at in zip(parts, offsets, strict=True):
                flat[at : at + len(part)] = part
            return torch.from_numpy(flat), offsets
        if self._staging is None or self._staging.numel() < total:
            self._staging = torch.empty(max(total, 4096), dtype=torch.int64).pin_memory()
        elif self.last_done is not None:  # recorded after the last copy out of the buffer
            self.last_done.synchronize()
        staging = self._staging.numpy()
        for part, at in zip(parts, offsets, strict=True):
            staging[at : at + len(part)] = part
        packed = torch.empty(total, dtype=torch.int64, device=self.device)  # [total]
        packed.copy_(self._staging[:total], non_blocking=True)
        return packed, offsets


def tables(
    packed: torch.Tensor, offsets: list[int], sizes: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernel's token [n, TOKEN_FIELDS], fact [F, FACT_FIELDS] and slab [S] tables: views of
    one uploaded tensor, its first three parts."""
    (t, f, s), (nt, nf, ns) = offsets[:3], sizes
    return (
        packed[t : t + nt].view(-1, inject.TOKEN_FIELDS),
        packed[f : f + nf].view(-1, inject.FACT_FIELDS),
        packed[s : s + ns],
    )
