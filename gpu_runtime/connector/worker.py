"""Worker half of the connector: scatters stored KV into a request's blocks, captures new KV.

Loads run in ``start_load`` before the forward (vLLM calls it first for synchronous loads). On
CUDA with the tiered pool they go through the fused kernel (``fused.py``), layer by layer when
facts sit on the host tier and vLLM runs the per-layer hooks. Otherwise the PyTorch path here
runs: for every layer, the stored keys are re-rotated to the positions the facts take in this
prompt (untouched where they already sit there) and written with the values through the layout
adapter. Captures read the fact span of every layer once the step's forward is enqueued and
store it, with the positions its keys were rotated at, once all of the fact's tokens are in.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import torch

from gpu_runtime.connector.fused import FusedLoader, fused_shape
from gpu_runtime.connector.metadata import CaptureRequest, InjectionMetadata, LoadRequest
from gpu_runtime.errors import RuntimeErrorBase
from gpu_runtime.layouts import PagedKVLayout, check_layer
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.base import KVStore
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId

logger = logging.getLogger(__name__)
_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")
SCRUB_VALUE = 3.0e4  # large finite garbage: attention over it visibly breaks the output


class MissingKVError(RuntimeErrorBase):
    """A fact the scheduler claimed vanished before the worker could load it."""


def layer_order(names: list[str]) -> list[str]:
    """Layer names sorted by their ``layers.<i>.`` index (vLLM's naming for decoder stacks)."""

    def index(name: str) -> int:
        match = _LAYER_INDEX.search(name)
        if match is None:
            raise ValueError(f"cannot find a layer index in {name!r}")
        return int(match.group(1))

    return sorted(names, key=index)


@dataclass
class _CaptureBuffer:
    tenant: TenantId
    keys: torch.Tensor  # [layers, total, H, D] cache dtype, post-RoPE as captured
    values: torch.Tensor  # [layers, total, H, D]
    positions: torch.Tensor  # [total] int64: where each token sat when captured
    filled: int = 0


class WorkerHalf:
    def __init__(
        self,
        store: KVStore,
        rotator: RopeRotator,
        layout: PagedKVLayout,
        *,
        fused: bool | None = None,  # None: on CUDA; True also on CPU (Triton's interpreter)
    ) -> None:
        self.store = store
        self.rotator = rotator
        self.layout = layout
        self.use_fused = fused
        self.fused: FusedLoader | None = None
        self.layers: list[str] = []
        self._layer_index: dict[str, int] = {}
        self._kv: dict[str, torch.Tensor] = {}
        self.device = torch.device("cpu")
        self._buffers: dict[tuple[str, FactKey], _CaptureBuffer] = {}

    def register(self, kv_caches: dict[str, torch.Tensor], backend: str) -> None:
        self.layers = layer_order(list(kv_caches))
        self._kv = dict(kv_caches)
        self.device = kv_caches[self.layers[0]].device
        bind = getattr(self.store, "bind_device", None)
        if bind is not None:  # the tiered pool puts its GPU arena next to the cache
            bind(self.device)
        for name in self.layers:
            check_layer(self.layout, kv_caches[name], backend)
        self._layer_index = {name: i for i, name in enumerate(self.layers)}
        ordered = [kv_caches[name] for name in self.layers]
        shape = fused_shape(self.store, self.layout, self.rotator, ordered)
        wanted = self.device.type == "cuda" if self.use_fused is None else self.use_fused
        if shape is not None and wanted:
            assert isinstance(self.store, TieredKVPool)
            fused = FusedLoader(self.store, shape, self.rotator, ordered)
            try:
                fused.warm_up()
            except Exception:  # a GPU/Triton we cannot compile for: the PyTorch path serves
                logger.exception("fused injection kernel unavailable; using the PyTorch path")
            else:
                self.fused = fused

    # ---- loads ---------------------------------------------------------------------------
    def start_load(self, meta: InjectionMetadata, layer_hooks: bool = True) -> None:
        """``layer_hooks``: vLLM will call ``wait_layer`` for every layer of this forward (not
        so in a replayed FULL CUDA graph); only then may host-tier reads run layer by layer."""
        if self.fused is not None and meta.loads:
            for load in meta.loads:
                if load.scrub_blocks:
                    self._scrub(load.scrub_blocks)
            if self.fused.start(meta.loads, layerwise=layer_hooks):
                return
        for load in meta.loads:
            self._load(load)

    def wait_layer(self, layer_name: str) -> None:
        """Before a layer's attention: a layer-wise fused load must have reached its cache."""
        if self.fused is not None:
            self.fused.wait_layer(self._layer_index[layer_name])

    def _load(self, load: LoadRequest) -> None:
        keys, values = self._gather(load)  # [L, n, H, D] each, keys at their target positions
        slots = torch.from_numpy(load.slots()).to(self.device)  # [n]
        if load.scrub_blocks:
            self._scrub(load.scrub_blocks)
        for index, name in enumerate(self.layers):
            self.layout.write(self._kv[name], slots, keys[index], values[index])

    def _gather(self, load: LoadRequest) -> tuple[torch.Tensor, torch.Tensor]:
        """All pieces concatenated, then moved to their prompt positions in one rotation."""
        keys, values, sources = [], [], []
        for piece in load.pieces:
            kv = self.store.get(load.tenant, piece.key)
            if kv is None:
                raise MissingKVError(f"KV for {piece.key} disappeared after it was claimed")
            window = slice(piece.src_offset, piece.src_offset + piece.n)
            keys.append(kv.keys[:, window].to(self.device, non_blocking=True))
            values.append(kv.values[:, window].to(self.device, non_blocking=True))
            sources.append(kv.positions[window].cpu())
        if sum(p.n for p in load.pieces) != load.end - load.start:
            raise MissingKVError("load pieces do not cover the claimed slots")
        k, v = torch.cat(keys, dim=1), torch.cat(values, dim=1)  # [L, n, H, D]
        source = torch.cat(sources)
        target = torch.cat([torch.arange(p.position, p.position + p.n) for p in load.pieces])
        if not torch.equal(source, target):
            k = self._rerotate(k, source, target)
        return k, v

    def _rerotate(
        self, keys: torch.Tensor, source: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """Chunked RoPE: keys [L, n, H, D] rotated at ``source`` [n] -> at ``target`` [n]."""
        n_layers = keys.shape[0]
        flat = keys.flatten(0, 1)  # [L*n, H, D]: one rotation call for every layer
        moved = self.rotator.move(flat, source.repeat(n_layers), target.repeat(n_layers))
        return moved.to(keys.dtype).view_as(keys)

    def _scrub(self, blocks: tuple[int, ...]) -> None:
        index = torch.tensor(blocks, dtype=torch.int64)
        for name in self.layers:
            kv_layer = self._kv[name]
            kv_layer[index.to(kv_layer.device)] = SCRUB_VALUE

    # ---- captures ------------------------------------------------------------------------
    def capture(self, captures: list[CaptureRequest]) -> None:
        """After the forward was enqueued: copies each capture piece's KV out of every layer.
        Done once per step rather than per layer, so it also works when vLLM replays a FULL
        CUDA graph (no per-layer hooks run then)."""
        first = self._kv[self.layers[0]]
        for request in captures:
            for piece in request.pieces:
                buffer = self._buffer(request, piece.key, piece.total, first)
                slots = torch.tensor(piece.slots, dtype=torch.int64, device=first.device)
                rows = slice(piece.dst_offset, piece.dst_offset + piece.n)
                for layer, name in enumerate(self.layers):
                    k, v = self.layout.read(self._kv[name], slots)  # [n, H, D] each
                    buffer.keys[layer, rows] = k
                    buffer.values[layer, rows] = v
                buffer.positions[rows] = torch.arange(piece.position, piece.position + piece.n)
                buffer.filled += piece.n

    def _buffer(
        self, request: CaptureRequest, key: FactKey, total: int, like: torch.Tensor
    ) -> _CaptureBuffer:
        slot = (request.req_id, key)
        if slot not in self._buffers:
            shape = (len(self.layers), total, like.shape[1], self.layout.geometry.head_size)
            # On the cache's device: captured KV is served from there (the disk copy is on CPU).
            self._buffers[slot] = _CaptureBuffer(
                request.tenant,
                torch.empty(shape, dtype=like.dtype, device=like.device),
                torch.empty(shape, dtype=like.dtype, device=like.device),
                torch.empty(total, dtype=torch.int64),
            )
        return self._buffers[slot]

    def finish_step(self) -> None:
        """Store every capture whose tokens are now all computed."""
        if self.fused is not None:
            self.fused.finish_step()
        done = [slot for slot, b in self._buffers.items() if b.filled >= b.keys.shape[1]]
        for slot in done:
            buffer = self._buffers.pop(slot)
            kv = FactKV.build(buffer.keys, buffer.values, buffer.positions)
            self.store.put(buffer.tenant, slot[1], kv)

    def forget(self, req_id: str) -> None:
        for slot in [s for s in self._buffers if s[0] == req_id]:
            del self._buffers[slot]
