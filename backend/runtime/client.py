"""The backend's one door to the GPU runtime service (``python -m gpu_runtime serve``).

``EngineClient`` speaks the runtime's internal API through ``RuntimeClient`` and turns its
failures into the backend's errors: the runtime unreachable, starting or dead is a 503; a request
it refuses (a prompt beyond the context) a 400. The encoding policy (w, the procedure's version)
is the backend's; the model part of every key is the runtime's.

With several runtime replicas (``INFERSCALE_RUNTIME_URLS``) every call about a tenant goes to
the tenant's replica (``ReplicaSet``: rendezvous hashing over the healthy ones), and moves on to
its next replica when that one cannot take it; purges go to every replica (``replica_purge``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from backend.core.config import Settings
from backend.errors import AppError, BadRequestError, UnavailableError
from backend.runtime.purge import purge_everywhere
from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import ComposedPrompt, EncodeItem, PromptComposer
from gpu_runtime.client.http import (
    RuntimeClient,
    RuntimeClientError,
    RuntimeRejectedError,
    RuntimeStreamError,
)
from gpu_runtime.client.replicas import ReplicaSet, is_replica_failure
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

T = TypeVar("T")


class EncodingFailedError(AppError):
    status_code, code = 503, "encoding_failed"


class EngineStreamError(AppError):
    """A generation that failed after its first token (the stream reports it)."""

    status_code, code = 503, "engine_error"


def _app_error(exc: RuntimeClientError) -> AppError:
    if isinstance(exc, RuntimeRejectedError):
        return BadRequestError(exc.message)
    return UnavailableError(f"the model runtime is unavailable: {exc.message}")


@contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except RuntimeStreamError as exc:
        raise EngineStreamError(exc.message) from exc
    except RuntimeClientError as exc:
        raise _app_error(exc) from exc


class EngineClient:
    def __init__(self, settings: Settings, runtime: RuntimeClient | None = None) -> None:
        self.settings = settings
        clients = [runtime] if runtime is not None else [
            RuntimeClient(url, settings.service_token, timeout_s=settings.runtime_timeout_s)
            for url in settings.runtime_replica_urls
        ]  # fmt: skip
        self.replicas = ReplicaSet(clients, probe_interval_s=settings.runtime_probe_interval_s)
        self._hints = ThreadPoolExecutor(max_workers=2, thread_name_prefix="inferscale-hints")
        self._loop: asyncio.AbstractEventLoop | None = None  # the API's, while it serves
        self._hints_in_flight: set[asyncio.Task[None]] = set()  # held: the loop keeps weak refs

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Send prefetch hints from ``loop`` (the API's, from start-up to shut-down; ``None``
        unbinds): an aiohttp post there costs the API half the CPU of a blocking post from a
        thread (0.44 against 0.99 ms a hint on the CPU box), and a hundred chats' hints no
        longer queue behind two threads."""
        self._loop = loop

    def _call(self, tenant: TenantId | None, fn: Callable[[RuntimeClient], T]) -> T:
        """``fn`` on the tenant's replica (``None``: any replica), failing over."""
        with _mapped():
            return self.replicas.call(tenant.value if tenant is not None else None, fn)

    def ready(self) -> bool:
        """Some replica is ready (every replica is probed now)."""
        self.replicas.probe_all()
        return any(view["status"] == "ok" for view in self.replicas.views())

    def replica_of(self, tenant: TenantId) -> str:
        """The URL of the replica that serves the tenant now."""
        return self.replicas.home(tenant.value).url

    def replica_order(self, tenant: TenantId) -> list[str]:
        return [r.url for r in self.replicas.order(tenant.value)]

    async def aclose(self) -> None:
        self._loop = None
        if self._hints_in_flight:  # sent, or given up within aprefetch's 2 s
            await asyncio.gather(*self._hints_in_flight, return_exceptions=True)
        await self.replicas.aclose()  # the streaming sessions of this event loop

    def model(self) -> p.ModelInfo:
        return self._call(None, lambda runtime: runtime.model())

    def serves_on_gpu(self) -> bool:
        """Whether the runtime's workers run on CUDA devices (its model info, cached)."""
        return any(str(w.get("device", "")).startswith("cuda") for w in self.model().workers)

    def encoding_config(self) -> EncodingConfig:
        s = self.settings
        return EncodingConfig(self.model().encoding_model, s.window_turns, s.encoding_version)

    def composer(self) -> PromptComposer:
        return self._call(None, lambda runtime: runtime.composer())

    # ---- encoding ------------------------------------------------------------------------
    def encode(
        self, tenant: TenantId, config: EncodingConfig, items: Sequence[EncodeItem]
    ) -> dict[FactKey, int]:
        """Stores every item's fact KV; returns the bytes each takes on disk."""
        request = p.EncodeRequest(
            tenant=tenant.value,
            window=config.window,
            version=config.version,
            items=[
                p.EncodeItemModel(token_ids=list(i.token_ids), capture=[p.span_model(i.span)])
                for i in items
            ],
        )
        result = self._call(tenant, lambda runtime: runtime.encode(request))
        if result.missing:
            raise EncodingFailedError(f"{len(result.missing)} of {len(items)} facts not stored")
        by_id = {(s.fact_id, s.fact_version): s.nbytes for s in result.stored}
        return {i.span.key: by_id[(i.span.key.fact_id, i.span.key.fact_version)] for i in items}

    def has(self, tenant: TenantId, keys: Sequence[FactKey]) -> bool:
        return all(self.stored(tenant, keys))

    def placement(self, tenant: TenantId, keys: Sequence[FactKey]) -> list[str | None]:
        """Per key: the pool tier holding its KV ("gpu", "host", "disk"), or None."""
        request = p.KeysRequest(tenant=tenant.value, keys=[p.key_model(k) for k in keys])
        return self._call(tenant, lambda runtime: runtime.placement(request))

    def stats(self, tenant: str | None = None) -> p.StatsResult:
        """Live pool statistics per worker rank: the tenant's, on its replica; or all of one
        replica's (any; ``replica_stats`` has every replica's)."""
        typed = TenantId(tenant) if tenant is not None else None
        return self._call(typed, lambda runtime: runtime.stats(tenant))

    def stats_everywhere(self, tenant: str | None = None) -> list[tuple[str, p.StatsResult]]:
        """The statistics (the tenant's, or all) of every replica that is up and answers."""
        outcomes = self.replicas.broadcast(lambda runtime: runtime.stats(tenant), only_up=True)
        return [(r.url, o) for r, o in outcomes if isinstance(o, p.StatsResult)]

    def replica_status(self) -> list[dict[str, Any]]:
        """Every replica, in the configured order: its health (probed now), and when it is up
        its instance, model and pool statistics per worker rank."""
        self.replicas.probe_all()
        views = self.replicas.views()
        for replica, view in zip(self.replicas.replicas, views, strict=True):
            if view["status"] != "ok":
                continue
            try:
                model, stats = replica.client.model(), replica.client.stats(None)
            except RuntimeClientError as exc:
                if is_replica_failure(exc):
                    self.replicas.failed(replica, exc)
                view.update(status="down", error=exc.message)
                continue
            view.update(
                runtime_id=model.runtime_id, model=model.model, dtype=model.dtype,
                max_model_len=model.max_model_len, block_size=model.block_size,
                workers=model.workers, pools=stats.workers,
                injection=(model.fidelity or {}).get("injection", "on"),
                fidelity=model.fidelity,
            )  # fmt: skip
        return views

    def stored(self, tenant: TenantId, keys: Sequence[FactKey]) -> list[bool]:
        """Per key: whether its durable copy exists (a corrupt file found on load is gone)."""
        if not keys:
            return []
        request = p.KeysRequest(tenant=tenant.value, keys=[p.key_model(k) for k in keys])
        return self._call(tenant, lambda runtime: runtime.contains(request))

    # ---- deletion ------------------------------------------------------------------------
    def purge(self, tenant: TenantId, keys: Sequence[FactKey]) -> None:
        """Returns once the facts are off every tier and the disk of every replica (503 if it
        cannot: see ``replica_purge``)."""
        if keys:
            request = p.PurgeRequest(tenant=tenant.value, keys=[p.key_model(k) for k in keys])
            purge_everywhere(self.replicas, request)

    def purge_tenant(self, tenant: TenantId) -> None:
        purge_everywhere(self.replicas, p.PurgeRequest(tenant=tenant.value, all=True))

    # ---- serving -------------------------------------------------------------------------
    def query_embedder(self, tenant: TenantId) -> tuple[str, str | None]:
        """(the tenant's runtime instance, the query embedding model it serves or None)."""
        info = self._call(tenant, lambda runtime: runtime.model())
        return info.runtime_id, info.query_embedder

    def embed_queries(self, tenant: TenantId, texts: list[str]) -> npt.NDArray[np.float32]:
        """[len(texts), dim] query embeddings from the tenant's runtime (``POST /v1/embed``)."""
        return self._call(tenant, lambda runtime: runtime.embed(texts))

    def prefetch(self, tenant: TenantId, keys: Sequence[FactKey]) -> None:
        """A hint sent as soon as retrieval knows the facts, in the background: it overlaps
        composing and never delays or fails a request."""
        request = p.KeysRequest(tenant=tenant.value, keys=[p.key_model(k) for k in keys])
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._hint_on_loop, request)
        else:  # no event loop (a worker, a script): a thread sends it
            self._hints.submit(self._send_hint, request)

    def _hint_on_loop(self, request: p.KeysRequest) -> None:
        replica = self.replicas.home(request.tenant)
        task = asyncio.ensure_future(replica.client.aprefetch(request))  # never raises
        self._hints_in_flight.add(task)
        task.add_done_callback(self._hints_in_flight.discard)

    def _send_hint(self, request: p.KeysRequest) -> None:
        replica = self.replicas.home(request.tenant)
        try:
            replica.client.prefetch(request)
        except RuntimeClientError as exc:
            if is_replica_failure(exc):
                self.replicas.failed(replica, exc)

    def complete(
        self, tenant: TenantId, token_ids: Sequence[int], sampling: p.SamplingModel
    ) -> tuple[str, str | None]:
        """A whole generation in prompt mode, waited for (worker jobs): its text and finish
        reason ("length" when ``max_tokens`` cut it)."""
        request = p.GenerateRequest(
            tenant=tenant.value, token_ids=list(token_ids), mode="prompt", sampling=sampling
        )

        def run(runtime: RuntimeClient) -> tuple[str, str | None]:
            parts, finish = [], None
            for event in runtime.generate(request):
                parts.append(event.text)
                if event.event == "done":
                    finish = event.finish_reason
            return "".join(parts), finish

        return self._call(tenant, run)

    def token_texts(self, token_ids: Sequence[int]) -> list[str]:
        """Each token's text under the served model's tokenizer (logprobs name tokens)."""
        return self._call(None, lambda runtime: runtime.tokenizer().token_texts(list(token_ids)))

    async def stream(
        self,
        tenant: TenantId,
        prompt: ComposedPrompt,
        mode: str,
        sampling: p.SamplingModel,
        weight: float = 1.0,
        request_id: str | None = None,
    ) -> AsyncIterator[p.GenerateEvent]:
        """``mode``: "kv" (inject the prompt's memory segment) or "prompt" (prefill it all).
        ``request_id``: the API's, so the runtime's logs name the same request."""
        request = p.GenerateRequest(
            tenant=tenant.value,
            token_ids=list(prompt.token_ids),
            mode="kv" if mode == "kv" else "prompt",
            segment=p.segment_model(prompt.segment) if mode == "kv" else None,
            sampling=sampling,
            weight=weight,
        )
        failure: RuntimeClientError | None = None
        for replica in self.replicas.order(tenant.value):
            started = False
            try:
                async for event in replica.client.agenerate(request, request_id):
                    if not started:
                        started = True
                        self.replicas.answered(replica)
                    yield event
                return
            except RuntimeStreamError as exc:
                raise EngineStreamError(exc.message) from exc
            except RuntimeClientError as exc:
                if started or not is_replica_failure(exc):
                    raise _app_error(exc) from exc
                self.replicas.failed(replica, exc)  # nothing ran there: the next replica may
                failure = exc
        assert failure is not None
        raise _app_error(failure) from failure
