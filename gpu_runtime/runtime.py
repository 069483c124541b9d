"""InjectionRuntime: vLLM's ``AsyncLLM`` with our connector, behind one tenant-typed async API.

The runtime process holds this object (the server wraps it in HTTP); the engine core and its
workers run in processes of their own, so this object holds no KV and no scheduler state. What it
does own: each tenant's prefix-cache epoch (part of every cache salt it derives), and the order
of out-of-band operations, which reach the workers through ``collective_rpc``.

``kv`` mode injects stored KV for the memory segment (vLLM prefills the rest), ``prompt`` mode
prefills the same token ids (Mem0-style). Encoding prefills [window][fact] and keeps the fact's
KV (the connector's capture), batched by vLLM with whatever else is running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

from gpu_runtime.client.inflight import InFlight, Tracked
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.connector.hints import HintSender
from gpu_runtime.connector.wire import WIRE_KEY, encode_params, segment_params
from gpu_runtime.engine import connector_options, refusal_errors, sampling_params, start_engine
from gpu_runtime.errors import EngineError, InvalidRequestError, PromptTooLongError
from gpu_runtime.fairness import FairGate
from gpu_runtime.generation import Delta, EncodeJob, Finish, Generation, Mode, Sampling
from gpu_runtime.store.disk.stored_facts import StoredFacts
from gpu_runtime.types import (
    EncodingConfig,
    FactKey,
    FactKeys,
    MemorySegment,
    Span,
    TenantId,
    cache_salt,
)

logger = logging.getLogger(__name__)


class InjectionRuntime:
    def __init__(self, engine: Any, settings: RuntimeSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.encoding_model = settings.model_name
        self._keys = FactKeys(self.encoding_model)
        self.max_model_len = settings.max_model_len
        vllm_config = engine.vllm_config
        self.block_size = int(vllm_config.cache_config.block_size)
        self.dtype = str(vllm_config.model_config.dtype).removeprefix("torch.")
        self.vocab_size = int(vllm_config.model_config.get_vocab_size())
        # Dummy-weight benchmark engines run without a tokenizer: ids only, no text.
        self.detokenize = not bool(getattr(vllm_config.model_config, "skip_tokenizer_init", False))
        self.disk = StoredFacts(settings.resolved_kv_store_dir)  # the workers write it
        self._epochs: dict[TenantId, int] = {}
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]
        self._preambles: dict[FactKey, asyncio.Future[None]] = {}
        self._hints: HintSender | None = None
        # Tenants' fair turns at the engine: ``engine_slots`` at once while they contend.
        self.gate = FairGate(settings.resolved_engine_slots, wide=settings.max_num_seqs)
        # Why injection is off (the fidelity canary failed): kv requests are prefilled instead.
        self.injection_off: str | None = None
        self.workers: list[dict[str, Any]] = []  # each rank, as it describes itself

    @classmethod
    async def start(cls, settings: RuntimeSettings) -> InjectionRuntime:
        """Starts the engine (tens of seconds) without blocking the event loop."""
        options = connector_options(settings)
        engine = await asyncio.to_thread(start_engine, settings, options)
        runtime = cls(engine, settings)
        runtime.workers = await runtime.describe()
        addresses = [w["hints"] for w in runtime.workers if w.get("hints")]
        runtime._hints = HintSender(addresses) if addresses else None
        return runtime

    def shutdown(self) -> None:
        if self._hints is not None:
            self._hints.close()
        self.engine.shutdown()

    @property
    def dead(self) -> bool:
        return bool(getattr(self.engine, "errored", False))

    @property
    def fact_keys(self) -> FactKeys:
        """This runtime's keys (for its encoding model), each built once."""
        return self._keys

    def key(self, tenant: TenantId, fact_id: str, version: int, window: int, enc: int) -> FactKey:
        """A key of ``tenant`` for this runtime's model (clients never name the model)."""
        return self._keys.get(tenant, fact_id, version, window, enc)

    def epoch(self, tenant: TenantId) -> int:
        return self._epochs.get(tenant, 0)

    # ---- serving -------------------------------------------------------------------------
    async def generate(
        self, request: Generation, tracked: Tracked | None = None
    ) -> AsyncIterator[Delta | Finish]:
        """Streams ``Delta`` s, then one ``Finish``; ``tracked``: the request in flight, moved
        through its stages here (preamble, fair_gate, engine, streaming)."""
        received = time.perf_counter()
        if request.mode is Mode.KV and self.injection_off is not None:
            # The fidelity canary failed: the same tokens, prefilled (exact, only slower).
            request = dataclasses.replace(request, mode=Mode.PROMPT, segment=None)
        tenant, sampling = request.tenant, request.sampling
        if len(request.token_ids) + sampling.max_tokens > self.max_model_len:
            raise PromptTooLongError(
                f"{len(request.token_ids)} prompt tokens + max_tokens {sampling.max_tokens} "
                f"exceed the context of {self.max_model_len} tokens"
            )
        params: dict[str, Any] | None = None
        if request.mode is Mode.KV:
            segment = request.segment
            if segment is None or segment.tenant != tenant or not segment.spans:
                raise InvalidRequestError("kv mode needs a memory segment of the tenant's facts")
            if segment.end > len(request.token_ids):
                raise InvalidRequestError("the memory segment reaches past the prompt")
            if len(segment.spans) == 1:
                # The preamble alone (no fact, or hybrid prefilling every fact): vLLM's prefix
                # cache holds the same KV (Theorem 3), so the request runs as prompt mode and
                # costs the connector nothing (injecting it cost +1.5 ms at k=0 on the H200).
                request = dataclasses.replace(request, mode=Mode.PROMPT, segment=None)
        if request.mode is Mode.KV:
            segment = request.segment
            assert segment is not None  # (checked above)
            if tracked is not None:
                InFlight.move(tracked, "preamble")
            await self._ensure_preamble(tenant, request.token_ids, segment)
            params = segment_params(segment)
            # Blocks hold injected and computed positions: their layout is part of the salt.
            purpose = f"{segment.config.fingerprint()}|spans={segment.layout_digest()}"
            salt = self._salt(tenant, purpose, sampling.prefix_cache)
        else:
            salt = self._salt(tenant, "prompt", sampling.prefix_cache)
        first: float | None = None
        prompt_tokens = len(request.token_ids)
        completion = cached = injected = 0
        finish: str | None = None
        trace: dict[str, float] | None = None
        async for output in self._run(
            tenant,
            request.token_ids,
            salt,
            sampling,
            params,
            request.weight,
            sampling.resumable,
            tracked,
        ):
            best = output.outputs[0]
            if best.token_ids and first is None:
                first = time.perf_counter()
            completion += len(best.token_ids)
            # (a resumed request's prompt holds its generated tokens too: counted up to the prompt)
            cached = min(int(output.num_cached_tokens or 0), prompt_tokens)
            logprobs = None
            if sampling.logprobs is not None and best.logprobs:
                logprobs = tuple(
                    tuple((tid, float(lp.logprob)) for tid, lp in step.items())
                    for step in best.logprobs
                )
            if best.token_ids or best.text:
                yield Delta(tuple(best.token_ids), best.text, logprobs)
            if output.finished:
                finish = best.finish_reason
                injected = _injected(output)
                trace = _scheduler_trace(output)
        ttft = (first - received) * 1000 if first is not None else None
        yield Finish(finish, prompt_tokens, completion, cached, injected, ttft, trace)

    # ---- encoding ------------------------------------------------------------------------
    async def encode(
        self, tenant: TenantId, config: EncodingConfig, jobs: Sequence[EncodeJob]
    ) -> tuple[dict[FactKey, int], list[FactKey]]:
        """Runs every job at once (vLLM batches them with the rest of its traffic); returns the
        stored facts with their bytes on disk, and the captured keys that were not stored."""
        if config.model != self.encoding_model:
            raise InvalidRequestError(f"this runtime encodes for {self.encoding_model!r}")
        for job in jobs:
            for span in (*job.capture, *job.inject):
                if span.key.tenant != tenant or span.end > len(job.token_ids):
                    raise InvalidRequestError(f"span {span.key.fact_id} is not in its prompt")
            if len(job.token_ids) + 1 > self.max_model_len:
                raise PromptTooLongError("an encode prompt exceeds the context")
        salt = self._salt(tenant, "encode|" + config.fingerprint())
        sampling = Sampling(max_tokens=1)

        async def one(job: EncodeJob) -> None:
            params = encode_params(tenant, config, inject=job.inject, capture=job.capture)
            async for _ in self._run(tenant, job.token_ids, salt, sampling, params):
                pass

        await asyncio.gather(*(one(job) for job in jobs))
        stored: dict[FactKey, int] = {}
        missing: list[FactKey] = []
        for span in (span for job in jobs for span in job.capture):
            size = self.disk.size(span.key)
            if size is None:
                missing.append(span.key)
            else:
                stored[span.key] = size
        return stored, missing

    async def _ensure_preamble(
        self, tenant: TenantId, token_ids: tuple[int, ...], segment: MemorySegment
    ) -> None:
        """The preamble (system prompt, facts header) is the segment's first span, encoded at
        position 0 with nothing before it, so its KV is exact; encoded once, on first use."""
        first = segment.spans[0]
        if not first.key.is_preamble or first.start != 0:
            return
        tokens = token_ids[: first.n_tokens]
        if FactKey.preamble(tenant, tokens, segment.config) != first.key:
            raise InvalidRequestError("the preamble key does not match the preamble's tokens")
        if self.disk.contains(first.key):
            return
        pending = self._preambles.get(first.key)
        if pending is None:
            job = EncodeJob(tokens, (Span(first.key, 0, len(tokens)),))
            task = asyncio.ensure_future(self._encode_preamble(tenant, segment.config, job))
            self._preambles[first.key] = pending = task
        await asyncio.shield(pending)

    async def _encode_preamble(
        self, tenant: TenantId, config: EncodingConfig, job: EncodeJob
    ) -> None:
        try:
            await self.encode(tenant, EncodingConfig(self.encoding_model, 0, config.version), [job])
        finally:
            self._preambles.pop(job.capture[0].key, None)

    # ---- out-of-band operations (every worker, ordered with engine steps) -----------------
    async def purge(self, tenant: TenantId, keys: Sequence[FactKey]) -> int:
        """Deletes facts from every tier and the disk on every worker, then bumps the tenant's
        prefix-cache epoch, so blocks that held them are never reused; returns facts held."""
        wire = [_wire(tenant, key) for key in keys]
        held = await self.engine.collective_rpc("inferscale_purge", args=(tenant.value, wire))
        self._bump(tenant)
        return max(held) if held else 0

    async def purge_tenant(self, tenant: TenantId) -> None:
        await self.engine.collective_rpc("inferscale_purge_tenant", args=(tenant.value,))
        self._bump(tenant)

    def prefetch(self, tenant: TenantId, keys: Sequence[FactKey]) -> None:
        """Starts moving facts towards the GPU tier on every worker: a hint, sent straight to
        each worker's hint socket (not through the engine core); returns at once."""
        if self._hints is None:
            return
        try:
            self._hints.send(tenant, keys)  # checks every key's tenant before sending anything
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc

    async def demote(
        self,
        tenant: TenantId,
        keys: Sequence[FactKey],
        tier: str,
        ranks: Sequence[int] | None = None,
    ) -> None:
        """``ranks``: only those tensor-parallel ranks' slices (``None``: every rank's)."""
        size = self.settings.tensor_parallel_size
        if ranks is not None and not all(0 <= rank < size for rank in ranks):
            raise InvalidRequestError(
                f"ranks must lie in 0..{size - 1} (tensor parallel size {size})"
            )
        wire = [_wire(tenant, key) for key in keys]
        chosen = list(ranks) if ranks is not None else None
        await self.engine.collective_rpc(
            "inferscale_demote", args=(tenant.value, wire, tier, chosen)
        )

    async def placement(self, tenant: TenantId, keys: Sequence[FactKey]) -> list[str | None]:
        """Each fact's tier: under tensor parallelism the slowest of the ranks' (a load waits for
        every rank's slice); "disk" when only the store holds it; ``None``: stored nowhere."""
        wire = [_wire(tenant, key) for key in keys]
        ranks = await self.engine.collective_rpc("inferscale_placement", args=(tenant.value, wire))
        order = {"gpu": 0, "host": 1}
        out: list[str | None] = []
        for key, tiers in zip(keys, zip(*ranks, strict=True), strict=True):
            if all(t in order for t in tiers):
                out.append(max(tiers, key=lambda t: order[t]))
            else:
                out.append("disk" if self.disk.contains(key) else None)
        return out

    def contains(self, tenant: TenantId, keys: Sequence[FactKey]) -> list[bool]:
        """Whether each fact is stored (the durable store is what every worker loads from)."""
        return [key.tenant == tenant and self.disk.contains(key) for key in keys]

    async def stats(self, tenant: TenantId | None) -> list[dict[str, Any]]:
        """Per worker rank: residency per tier, counters and load latency."""
        name = tenant.value if tenant is not None else None
        result: list[dict[str, Any]] = await self.engine.collective_rpc(
            "inferscale_stats", args=(name,)
        )
        return result

    async def trace(self, reset: bool) -> list[dict[str, Any]]:
        """Per worker process: the connector hooks' timings (``connector/timing.py``)."""
        result: list[dict[str, Any]] = await self.engine.collective_rpc(
            "inferscale_trace", args=(reset,)
        )
        return result

    async def describe(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self.engine.collective_rpc("inferscale_describe")
        return result

    # ---- internals -----------------------------------------------------------------------
    def _bump(self, tenant: TenantId) -> None:
        self._epochs[tenant] = self.epoch(tenant) + 1

    def _salt(self, tenant: TenantId, purpose: str, shared: bool = True) -> str:
        """Derived here only. ``shared=False``: a salt of this request alone, so it neither
        reuses nor leaves reusable prefix-cache blocks (the connector still injects)."""
        nonce = "" if shared else f"|{uuid.uuid4().hex}"
        return cache_salt(tenant, f"{purpose}|e{self.epoch(tenant)}{nonce}")

    async def _run(
        self,
        tenant: TenantId,
        token_ids: tuple[int, ...],
        salt: str,
        sampling: Sampling,
        params: dict[str, Any] | None,
        weight: float | None = None,
        preemptible: bool = False,
        tracked: Tracked | None = None,
    ) -> AsyncIterator[Any]:
        """vLLM's delta outputs for one request, through the fair gate. A ``preemptible``
        request asked to give its slot back (``Lease.yield_now``) is stopped in the engine and
        resumed from its prompt and the tokens it generated: the stream goes on where it was."""
        refused = refusal_errors()
        generated: list[int] = []
        resumed = False
        try:
            while True:
                rest = sampling.max_tokens - len(generated)
                left = dataclasses.replace(sampling, max_tokens=rest)
                vllm_params = sampling_params(
                    left, self.detokenize and left.detokenize, dict(params or {}) or None
                )
                prompt = {"prompt_token_ids": [*token_ids, *generated], "cache_salt": salt}
                request_id = f"isr-{self._prefix}-{next(self._ids)}"
                gave_back = False
                if tracked is not None:
                    InFlight.move(tracked, "fair_gate")
                # Closed explicitly: a client that goes away aborts its request in the engine now.
                async with (
                    self.gate.slot(
                        tenant, len(token_ids), weight, preemptible=preemptible, resumed=resumed
                    ) as lease,
                    aclosing(self.engine.generate(prompt, vllm_params, request_id)) as stream,
                ):
                    if tracked is not None:
                        InFlight.move(tracked, "engine")
                    async for output in stream:
                        if tracked is not None:
                            _progressed(tracked)
                        new = output.outputs[0].token_ids
                        self.gate.charge_decode(lease, len(new))
                        generated.extend(new)
                        yield output
                        if lease.yield_now and not output.finished:
                            gave_back = True
                            break
                if not gave_back:
                    return
                resumed = True
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except refused as exc:  # vLLM refused the request (e.g. a schema it cannot use)
            raise InvalidRequestError(str(exc)) from exc
        except Exception as exc:
            if self.dead:
                raise EngineError(f"the engine stopped: {exc}") from exc
            raise


def _progressed(tracked: Tracked) -> None:
    """An output from the engine: streaming from the first on, each one progress."""
    if tracked.stage == "streaming":
        tracked.touch()
    else:
        InFlight.move(tracked, "streaming")


def _wire(tenant: TenantId, key: FactKey) -> dict[str, Any]:
    if key.tenant != tenant:
        raise InvalidRequestError("a key of another tenant")
    return key.to_wire()


def _ours(output: Any) -> dict[str, Any]:
    """What the connector's scheduler half put in the request's final output."""
    params = getattr(output, "kv_transfer_params", None) or {}
    ours = params.get(WIRE_KEY) if isinstance(params, dict) else None
    return ours if isinstance(ours, dict) else {}


def _injected(output: Any) -> int:
    """Tokens the connector supplied, as its scheduler half reported them."""
    return int(_ours(output).get("injected", 0))


def _scheduler_trace(output: Any) -> dict[str, float] | None:
    """The engine core's connector hook totals (ms) when the hooks are timed, else ``None``."""
    trace = _ours(output).get("trace_ms")
    return {str(k): float(v) for k, v in trace.items()} if isinstance(trace, dict) else None
