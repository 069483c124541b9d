"""Fused, layer-wise loading of a step's injected facts from the tiered pool (CUDA fast path).

For every step with loads, the facts are pinned where they sit (``TieredKVPool.acquire``), one
small int64 plan is uploaded (per token: fact, token in fact, position change, cache slot; per
fact: arena, length, slab-table row) and ``kernels.inject`` does the rest. A step whose one load
is a run of the facts its prefetch hint pinned (the usual kv request) uploads that run's rows as
the hint's thread planned them, with the request's blocks, and the kernel's run mode shifts and
places each token itself (``plan.plan_run``): no per-token work on the engine core's thread.

* all facts on the GPU tier: one launch for every layer, on the compute stream;
* any fact on the host tier: one launch per layer on a side stream, a few layers ahead of the
  forward, each followed by an event that ``wait_for_layer_load`` makes the compute stream wait
  on; the host->GPU reads of layer ``l`` overlap the forward of the layers before it.

Pins are released once the kernels that read the slabs have completed (checked without
blocking at the next step), so nothing a step reads can be evicted under it.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import torch

from gpu_runtime.connector import timing, upload
from gpu_runtime.connector.ahead import PinnedAhead
from gpu_runtime.connector.codec import FactCodec
from gpu_runtime.connector.metadata import LoadRequest
from gpu_runtime.connector.plan import TokenTemplate, plan_run, plan_tables
from gpu_runtime.connector.upload import PlanUpload
from gpu_runtime.errors import ShortFactError
from gpu_runtime.kernels import inject
from gpu_runtime.layouts import FlashLogicalLayout, PagedKVLayout
from gpu_runtime.pool.arena import PinnedFacts
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.quant import is_fp8
from gpu_runtime.types import FactKey, TenantId

LOOKAHEAD_LAYERS = 3  # host-tier loads launched this many layers ahead of the forward
FUSED_PLANS = ("run", "planned", "declined")  # how a step's loads were served (``plans``)


@dataclass
class _Step:
    pins: list[tuple[TenantId, list[FactKey]]]
    plan: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # tokens, facts, slab table on device
    run: inject.RunPlacement | None  # the kernel's run mode: ``tokens`` are a template's rows
    layerwise: bool
    launched: int = 0  # layers launched so far
    events: list[torch.cuda.Event] = field(default_factory=list)
    done: torch.cuda.Event | None = None  # recorded once every layer's reads were enqueued


def fused_shape(
    pool: object, layout: PagedKVLayout, codec: FactCodec, layers: list[torch.Tensor]
) -> inject.KernelShape | None:
    """The kernel's specialisation, or ``None`` when this setup must use the PyTorch path."""
    rotator = codec.rotator
    if not (inject.available() and isinstance(pool, TieredKVPool)):
        return None
    if not isinstance(layout, FlashLogicalLayout) or not rotator.composes:
        return None
    first = layers[0]
    if first.stride(3) != 1:
        return None
    if any(t.shape != first.shape or t.stride() != first.stride() for t in layers):
        return None
    g = layout.geometry
    shape = inject.KernelShape(
        kv_heads=g.num_kv_heads, head_size=g.head_size, rotary_dim=rotator.rotary_dim,
        neox=rotator.is_neox_style, dtype=g.dtype, n_layers=len(layers),
        block_size=g.block_size, strides=(first.stride(0), first.stride(1), first.stride(2)),
        slab_bytes=pool.slab_bytes, fact_dtype=codec.fact_dtype, scaled=is_fp8(codec.fact_dtype),
    )  # fmt: skip
    if not inject.supported(shape):
        return None
    rows = (shape.row_bytes, shape.scale_row_bytes or shape.row_bytes)
    return shape if all(pool.slab_bytes % row == 0 for row in rows) else None


class FusedLoader:
    def __init__(
        self,
        pool: TieredKVPool,
        shape: inject.KernelShape,
        codec: FactCodec,
        layers: list[torch.Tensor],  # each [blocks, H, block_size, 2 * D], in layer order
    ) -> None:
        self.pool = pool
        self.shape = shape
        self.device = layers[0].device
        rotator = codec.rotator
        cache = codec.cache
        scales = (cache.key_scales, cache.value_scales)
        self._cache_scales = (
            torch.stack([s.to(self.device, torch.float32) for s in scales])  # type: ignore[union-attr]
            if cache.fp8
            else torch.ones((2, len(layers)), dtype=torch.float32, device=self.device)
        )  # [2, L]: an FP8 cache's K and V scale per layer
        self._layers = torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64).to(
            self.device
        )  # [L] base addresses
        self._cos_sin = rotator.cos_sin_cache.to(self.device).contiguous()  # [max_pos, ROT] fp32
        self._max_position = rotator.max_position
        self._cuda = self.device.type == "cuda"
        # Arenas are allocated once and never move: their base addresses are a constant table.
        self._arenas = torch.tensor(pool.arena_addresses(), dtype=torch.int64).to(self.device)
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None  # type: ignore[no-untyped-call]
        self._step: _Step | None = None
        self._upload = PlanUpload(self.device)  # the step's tables to the device
        self._retired: list[_Step] = []
        self._retired_lock = threading.Lock()  # the pool may reclaim from another thread
        # What prefetch hints pinned ahead of their loads (``ahead.py``), released when a load
        # takes it or when it expires.
        self.ahead = PinnedAhead(pool.acquire, pool.release)
        # Steps by how they were served: "run" (the kernel's run mode), "planned" (per token),
        # "declined" (left to the PyTorch path: a fact gone, stored short or in another format).
        self.plans: Counter[str] = Counter()
        pool.add_reclaimer(self.release_completed)
        pool.add_reclaimer(self.ahead.sweep)

    def warm_up(self) -> None:
        """Compiles the kernel now (not on the first request) by injecting one token, read
        from slab 0 of the GPU arena, into a scratch block standing in for every layer."""
        g = self.shape
        dtype = torch.uint8 if is_fp8(g.dtype) else g.dtype  # vLLM keeps FP8 caches as bytes
        scratch = torch.zeros(
            (1, g.kv_heads, g.block_size, 2 * g.head_size), dtype=dtype, device=self.device
        )  # [1 block, H, block_size, 2 * D]
        strides = (scratch.stride(0), scratch.stride(1), scratch.stride(2))
        shape = inject.KernelShape(**{**g.__dict__, "strides": strides})

        def ints(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=self.device)

        layers = ints([scratch.data_ptr()] * g.n_layers)  # [L]: every layer -> the scratch
        tokens = ints([0, 0, 0, 0]).view(1, inject.TOKEN_FIELDS)  # fact 0, token 0, delta 0, slot 0
        facts = ints([0, 1, 0]).view(1, inject.FACT_FIELDS)  # GPU arena, 1 token, slab row 0
        blob = 2 * g.n_layers * (g.row_bytes + g.scale_row_bytes)  # a 1-token blob's bytes
        slabs = ints([0] * (blob // g.slab_bytes + 1))  # all slab 0: reads stay in the arena
        tables = (self._arenas, layers, self._cos_sin, self._cache_scales)
        inject.launch(shape, tokens, facts, slabs, *tables, 0, g.n_layers)
        inject.launch(shape, tokens, facts, slabs, *tables, 1, 1)
        run = inject.RunPlacement(ints([0, 0]), 0, 0, 0)  # position 0: block 0, slot 0
        inject.launch(shape, tokens, facts, slabs, *tables, 0, g.n_layers, run)
        if self._cuda:
            torch.cuda.synchronize(self.device)

    # ---- per step ------------------------------------------------------------------------
    def start(self, loads: list[LoadRequest], layerwise: bool = True) -> bool:
        """Plans and starts a step's loads; ``False`` (nothing done) if the slow path must run.
        ``layerwise=False``: host-tier facts are read in the same single launch, before the
        forward (for forwards whose per-layer hooks will not run)."""
        self.release_completed()
        self.ahead.sweep()
        pins: list[tuple[TenantId, list[FactKey]]] = []
        pinned: list[PinnedFacts] = []
        templates: list[TokenTemplate | None] = []  # where the prefetch hint planned ahead
        with timing.section("load_acquire"):
            for load in loads:
                acquired = self._acquire(load, pins)
                if acquired is None:
                    self._unpin(pins)
                    self.plans["declined"] += 1
                    return False
                pinned.append(acquired[0])
                templates.append(acquired[1])
        kernel_format = {(self.shape.stored_dtype, self.shape.scaled)}
        if any(found.formats != kernel_format for found in pinned):
            # Facts stored in another format than the kernel reads: the PyTorch path converts
            # them. (The fact dtype is part of every key, so a runtime's own writes are all in
            # its format; a store written otherwise must not kill the engine.)
            self._unpin(pins)
            self.plans["declined"] += 1
            return False
        try:
            with timing.section("load_plan"):
                plan, run = self._plan(loads, pinned, templates)
        except ShortFactError:  # stored shorter than claimed: the PyTorch path reports it
            self._unpin(pins)  # and has vLLM recompute, as for a fact gone
            self.plans["declined"] += 1
            return False
        except Exception:
            self._unpin(pins)
            raise
        on_host = any(found.on_host for found in pinned)
        self.plans["run" if run is not None else "planned"] += 1
        step = _Step(pins, plan, run, layerwise=self._cuda and on_host and layerwise)
        self._step = step
        with timing.section("load_ready"):
            for event in (event for found in pinned for event in found.ready):
                # a fact promoted by a prefetch whose copy may still be landing
                torch.cuda.current_stream(self.device).wait_event(event)
        if step.layerwise:
            assert self._stream is not None
            self._stream.wait_stream(torch.cuda.current_stream(self.device))  # blocks now free
            self._launch_ahead(step, LOOKAHEAD_LAYERS)
        else:
            with timing.section("load_launch"):
                self._run(step, 0, self.shape.n_layers)
            step.launched = self.shape.n_layers
            self._finish(step)
        return True

    def _acquire(
        self, load: LoadRequest, pins: list[tuple[TenantId, list[FactKey]]]
    ) -> tuple[PinnedFacts, TokenTemplate | None] | None:
        """A load's facts pinned (what its prefetch hint pinned ahead, and the rest now), each
        pinning added to ``pins``, with the hint's plan of them if it pinned them all; ``None``
        if a fact is gone."""
        keys = list(dict.fromkeys(piece.key for piece in load.pieces))
        taken = self.ahead.take(load.tenant, keys)
        if taken is None:
            found = self.pool.acquire(load.tenant, keys)
            if found is None:
                return None
            pins.append((load.tenant, keys))
            return found, None
        pins.append((load.tenant, taken.keys))
        if len(taken.keys) == len(keys):  # the hint named them all (it holds no others)
            return taken.found, taken.template
        held = set(taken.keys)
        rest = [key for key in keys if key not in held]
        others = self.pool.acquire(load.tenant, rest)
        if others is None:
            return None
        pins.append((load.tenant, rest))
        return PinnedFacts.joined([taken.found, others]), None

    def wait_layer(self, layer: int) -> None:
        """Called before layer ``layer``'s attention: its injected KV must be in the cache."""
        step = self._step
        if step is None or not step.layerwise:
            return
        self._launch_ahead(step, layer + 1 + LOOKAHEAD_LAYERS)
        torch.cuda.current_stream(self.device).wait_event(step.events[layer])

    def finish_step(self) -> None:
        """After the forward was enqueued: every layer is launched and ordered before later work."""
        step = self._step
        if step is None:
            return
        if step.layerwise:
            self._launch_ahead(step, self.shape.n_layers)
            assert step.done is not None
            torch.cuda.current_stream(self.device).wait_event(step.done)
        self._step = None

    # ---- internals -----------------------------------------------------------------------
    def _launch_ahead(self, step: _Step, until: int) -> None:
        assert self._stream is not None
        with torch.cuda.stream(self._stream):
            while step.launched < min(until, self.shape.n_layers):
                self._run(step, step.launched, 1)
                event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                event.record(self._stream)
                step.events.append(event)
                step.launched += 1
            if step.launched == self.shape.n_layers and step.done is None:
                self._finish(step)

    def _run(self, step: _Step, start: int, count: int) -> None:
        tokens, facts, slab_table = step.plan
        inject.launch(
            self.shape, tokens, facts, slab_table, self._arenas, self._layers, self._cos_sin,
            self._cache_scales, start, count, step.run,
        )  # fmt: skip

    def _finish(self, step: _Step) -> None:
        if self._cuda:
            step.done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            step.done.record()
            self._upload.last_done = step.done
            self._retired.append(step)
        else:  # CPU: the kernel ran synchronously
            self._unpin(step.pins)

    def release_completed(self) -> None:
        """Unpins the facts of earlier steps whose reads have finished (never blocks). Called at
        each step and by the pool before it plans evictions or demotions."""
        finished: list[_Step] = []
        with self._retired_lock:
            waiting: list[_Step] = []
            for step in self._retired:
                done = step.done is not None and step.done.query()  # type: ignore[no-untyped-call]
                (finished if done else waiting).append(step)
            self._retired = waiting
        for step in finished:
            self._unpin(step.pins)

    def _unpin(self, pins: list[tuple[TenantId, list[FactKey]]]) -> None:
        for tenant, keys in pins:
            self.pool.release(tenant, keys)

    def _plan(
        self,
        loads: list[LoadRequest],
        pinned: list[PinnedFacts],
        templates: list[TokenTemplate | None],
    ) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], inject.RunPlacement | None]:
        """The step's int64 tables on the device, and where the kernel places them in its run
        mode. A step of one load that is a run of its hint's template uploads the template's
        rows as they are (``plan.plan_run``); any other is planned per token
        (``plan.plan_tables``)."""
        if len(loads) == 1 and templates[0] is not None:
            with timing.section("load_plan_ahead"):
                run = plan_run(
                    loads[0], pinned[0], templates[0], self.shape.n_layers, self._max_position
                )
            if run is not None:
                with timing.section("load_upload"):
                    packed, offsets = self._upload([run.tokens.ravel(), run.facts.ravel(),
                                                    run.slabs, run.blocks])  # fmt: skip
                tables = upload.tables(packed, offsets, (run.tokens.size, run.facts.size,
                                                   run.slabs.size))  # fmt: skip
                at = offsets[3]
                blocks = packed[at : at + run.blocks.size]
                return tables, inject.RunPlacement(blocks, run.shift, run.start, run.first_block)
        tokens, facts, slabs = plan_tables(
            loads, pinned, templates, self.shape.n_layers, self._max_position
        )  # [n, TOKEN_FIELDS], [F, FACT_FIELDS], [S]
        with timing.section("load_upload"):
            packed, offsets = self._upload([tokens.ravel(), facts.ravel(), slabs])
        return upload.tables(packed, offsets, (tokens.size, facts.size, slabs.size)), None
