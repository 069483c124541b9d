"""Worker half of the connector: scatters stored KV into a request's blocks, captures new KV.

The worker half owns the KV tensors: the store (the tiered pool, or memory backed by disk) lives
in its process and nowhere else. It acts only on the plain metadata the scheduler half sends and
reports back what changed (``WorkerReport``) and which claimed blocks it could not fill.

Loads run in ``start_load`` before the forward (vLLM calls it first for synchronous loads). On
CUDA with the tiered pool they go through the fused kernel (``fused.py``), layer by layer when
facts sit on the host tier and vLLM runs the per-layer hooks. Otherwise the PyTorch path here
runs: for every layer, the stored keys are re-rotated to the positions the facts take in this
prompt (untouched where they already sit there) and written with the values through the layout
adapter; FP8 facts are dequantized (and, for an FP8 cache, re-quantized) on the way
(``FactCodec``, ``codec.py``). A fact that is gone (purged, or its file found corrupt) fails
only its own request: the pieces before it are written and its blocks from there on are
reported, so vLLM recomputes them from the prompt text. Captures read the fact span of every
layer once the step's forward is enqueued and store it (in the runtime's fact format), with the
positions its keys were rotated at, once all of its tokens are in.
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass

import torch

from gpu_runtime.connector.codec import CacheFormat, FactCodec
from gpu_runtime.connector.fused import FusedLoader, fused_shape
from gpu_runtime.connector.metadata import (
    CaptureRequest,
    InjectionMetadata,
    LoadPiece,
    LoadRequest,
    WorkerReport,
)
from gpu_runtime.errors import RuntimeErrorBase
from gpu_runtime.layouts import PagedKVLayout, check_layer
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.base import KVStore
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.quant import FP8_MAX, FactDType, is_fp8
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
    keys: torch.Tensor  # [layers, total, H, D] as the cache holds them, post-RoPE
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
        codec: FactCodec | None = None,  # default: facts stored as the cache holds them
    ) -> None:
        self.store = store
        self.rotator = rotator
        self.layout = layout
        self.codec = codec or FactCodec(CacheFormat(layout.geometry.dtype), FactDType.AUTO, rotator)
        self.use_fused = fused
        self.fused: FusedLoader | None = None
        self.layers: list[str] = []
        self._layer_index: dict[str, int] = {}
        self._kv: dict[str, torch.Tensor] = {}
        self.device = torch.device("cpu")
        self._buffers: dict[tuple[str, FactKey], _CaptureBuffer] = {}
        self._report = WorkerReport()
        self._failed_blocks: set[int] = set()

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
        shape = fused_shape(self.store, self.layout, self.codec, ordered)
        wanted = self.device.type == "cuda" if self.use_fused is None else self.use_fused
        if shape is not None and wanted:
            assert isinstance(self.store, TieredKVPool)
            fused = FusedLoader(self.store, shape, self.codec, ordered)
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
        for load in meta.loads:  # the PyTorch path; also when a fused plan found a fact gone
            self._load(load)

    def wait_layer(self, layer_name: str) -> None:
        """Before a layer's attention: a layer-wise fused load must have reached its cache."""
        if self.fused is not None:
            self.fused.wait_layer(self._layer_index[layer_name])

    def _load(self, load: LoadRequest) -> None:
        pieces, gone = self._fetch(load)
        written = sum(piece.n for piece, _ in pieces)
        if pieces:
            keys, values = self._gather(pieces)  # [L, n, H, D] each, keys at their positions
            slots = torch.from_numpy(load.slots()[:written]).to(self.device)  # [n]
            if load.scrub_blocks:
                self._scrub(load.scrub_blocks)
            for index, name in enumerate(self.layers):
                self.layout.write(self._kv[name], slots, keys[index], values[index])
        if gone is not None:
            first = (load.start + written) // load.block_size
            last = (load.end - 1) // load.block_size
            self._failed_blocks.update(load.block_ids[first : last + 1])
            self._report.failed_loads[load.req_id] = first * load.block_size
            logger.warning(
                "request %s: KV of %s is gone; vLLM recomputes positions %d-%d",
                load.req_id, gone.key, load.start + written, load.end,
            )  # fmt: skip

    def _fetch(self, load: LoadRequest) -> tuple[list[tuple[LoadPiece, FactKV]], LoadPiece | None]:
        """The stored KV of each piece, in order, up to the first piece whose fact is gone or
        shorter than the claim (returned second; ``None`` if every piece was found)."""
        if sum(p.n for p in load.pieces) != load.end - load.start:
            raise MissingKVError("load pieces do not cover the claimed slots")
        found: list[tuple[LoadPiece, FactKV]] = []
        for piece in load.pieces:
            kv = self.store.get(load.tenant, piece.key)
            if kv is None or kv.n_tokens < piece.src_offset + piece.n:
                self._report.dropped.append(piece.key)
                return found, piece
            found.append((piece, kv))
        return found, None

    def _gather(self, pieces: list[tuple[LoadPiece, FactKV]]) -> tuple[torch.Tensor, torch.Tensor]:
        """All pieces concatenated, in what the cache holds at their prompt positions. Each run
        of pieces stored alike is converted on its own (``FactCodec.to_cache``: re-rotated,
        dequantized or re-quantized), in order. (A runtime writes one format, and the format
        is part of every key; but a store holding both under one key, as written by hand,
        once raised here and took the engine down.)"""
        runs = itertools.groupby(pieces, key=lambda found: _format(found[1]))
        converted = [self._gather_alike(list(run)) for _, run in runs]
        if len(converted) == 1:
            return converted[0]
        keys, values = zip(*converted, strict=True)
        return torch.cat(keys, dim=1), torch.cat(values, dim=1)  # [L, n, H, D]

    def _gather_alike(
        self, pieces: list[tuple[LoadPiece, FactKV]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pieces stored in one format, concatenated and converted for the cache."""
        keys, values, key_scales, value_scales, sources = [], [], [], [], []
        for piece, kv in pieces:
            window = slice(piece.src_offset, piece.src_offset + piece.n)
            keys.append(kv.keys[:, window].to(self.device, non_blocking=True))
            values.append(kv.values[:, window].to(self.device, non_blocking=True))
            if kv.key_scales is not None and kv.value_scales is not None:
                key_scales.append(kv.key_scales[:, window].to(self.device, non_blocking=True))
                value_scales.append(kv.value_scales[:, window].to(self.device, non_blocking=True))
            sources.append(kv.positions[window].cpu())
        k, v = torch.cat(keys, dim=1), torch.cat(values, dim=1)  # [L, n, H, D]
        ks = torch.cat(key_scales, dim=1) if key_scales else None  # [L, n, H]
        vs = torch.cat(value_scales, dim=1) if value_scales else None
        source = torch.cat(sources)
        target = torch.cat([torch.arange(p.position, p.position + p.n) for p, _ in pieces])
        return self.codec.to_cache(k, v, ks, vs, source, target)

    def _scrub(self, blocks: tuple[int, ...]) -> None:
        index = torch.tensor(blocks, dtype=torch.int64)
        dtype = self.layout.geometry.dtype
        for name in self.layers:
            kv_layer = self._kv[name]
            if is_fp8(dtype):  # vLLM keeps FP8 caches as bytes: the largest finite value's
                byte = torch.tensor(FP8_MAX[dtype]).to(dtype).view(torch.uint8)
                kv_layer.view(torch.uint8)[index.to(kv_layer.device)] = byte.to(kv_layer.device)
            else:
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
            dtype = self.layout.geometry.dtype  # as attention reads it (FP8 caches: not bytes)
            self._buffers[slot] = _CaptureBuffer(
                request.tenant,
                torch.empty(shape, dtype=dtype, device=like.device),
                torch.empty(shape, dtype=dtype, device=like.device),
                torch.empty(total, dtype=torch.int64),
            )
        return self._buffers[slot]

    def finish_step(self) -> None:
        """Store every capture whose tokens are now all computed."""
        if self.fused is not None:
            self.fused.finish_step()
        done = [slot for slot, b in self._buffers.items() if b.filled >= b.keys.shape[1]]
        by_tenant: dict[TenantId, list[tuple[FactKey, FactKV]]] = {}
        for slot in done:
            buffer = self._buffers.pop(slot)
            kv = self.codec.capture(buffer.keys, buffer.values, buffer.positions)
            by_tenant.setdefault(buffer.tenant, []).append((slot[1], kv))
        for tenant, items in by_tenant.items():  # one durable commit per tenant per step
            self.store.put_many(tenant, items)
            self._report.stored.extend(key for key, _ in items)

    # ---- reports and out-of-band operations -----------------------------------------------
    def take_report(self) -> WorkerReport | None:
        """What changed since the last call (``None`` if nothing): sent with the step's output."""
        report, self._report = self._report, WorkerReport()
        return report or None

    def take_failed_blocks(self) -> set[int]:
        """Claimed blocks this step could not fill; vLLM recomputes them."""
        failed, self._failed_blocks = self._failed_blocks, set()
        return failed

    def prefetch(self, tenant: TenantId, keys: list[FactKey]) -> None:
        """A prefetch hint (the hint listener's thread): the facts start moving to the GPU
        tier, and with the fused loader they are pinned for the load to come (``ahead.py``)."""
        self.store.prefetch(tenant, keys)
        if self.fused is not None:
            self.fused.ahead.hint(tenant, keys)

    def purge(self, tenant: TenantId, keys: list[FactKey]) -> int:
        """Deletes facts from every tier and the disk; returns how many were held."""
        if self.fused is not None:
            self.fused.ahead.drop(tenant)  # nothing purged stays pinned by a hint
        removed = self.store.delete_many(tenant, keys)
        self._report.dropped.extend(keys)
        return removed

    def purge_tenant(self, tenant: TenantId) -> None:
        if self.fused is not None:
            self.fused.ahead.drop(tenant)
        self.store.delete_tenant(tenant)
        self._report.dropped_tenants.append(tenant)

    def forget(self, req_id: str) -> None:
        for slot in [s for s in self._buffers if s[0] == req_id]:
            del self._buffers[slot]


def _format(kv: FactKV) -> tuple[torch.dtype, bool]:
    """How a fact is stored: its element type, and whether it carries FP8 scales."""
    return kv.keys.dtype, kv.key_scales is not None
