"""RuntimeClient: the HTTP client of the runtime's internal API (sync, and async for streams).

Reconnects by itself: every call opens or reuses a pooled connection, so a restarted runtime is
reached again on the next call. Every answer names the runtime instance; when it changes, the
cached model info and composer (the chat template, the tokenizer) are fetched afresh.

Sync calls use httpx; streams and hints use aiohttp, whose connection pool stays cheap with a
hundred streams open (httpcore's pool scans every connection for every request and read, which
made the client, not the runtime, the bottleneck at 100 concurrent streams on the H200).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx
import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import DEFAULT_SYSTEM_PROMPT, PromptComposer
from gpu_runtime.client.errors import (
    RuntimeClientError,
    RuntimeNotListeningError,
    RuntimeRejectedError,
    RuntimeStreamError,
    RuntimeUnavailableError,
)
from gpu_runtime.client.events import EventReader, read_events
from gpu_runtime.client.inflight import REQUEST_ID_HEADER
from gpu_runtime.client.template import ChatTemplate
from gpu_runtime.client.tokenizer import TextStream, TextTokenizer


def _not_listening(exc: BaseException) -> bool:
    """A refused connection or an unknown name anywhere in the exception's causes (httpx and
    aiohttp wrap the socket's error)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError | socket.gaierror):
            return True
        if isinstance(seen, aiohttp.ClientConnectorError) and _not_listening(seen.os_error):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _unreachable(base_url: str, exc: BaseException) -> RuntimeUnavailableError:
    kind = RuntimeNotListeningError if _not_listening(exc) else RuntimeUnavailableError
    return kind(f"the runtime at {base_url} is unreachable: {exc}", "unreachable")


def _raise_for(response: httpx.Response) -> None:
    if response.status_code >= 400:
        _raise_status(response.status_code, response.content)


def _raise_status(status: int, body: bytes) -> None:
    try:
        error = json.loads(body)["error"]
        code, message = str(error["code"]), str(error["message"])
    except Exception:
        code, message = "runtime_error", body[:500].decode(errors="replace")
    kind = RuntimeUnavailableError if status >= 500 else RuntimeRejectedError
    raise kind(message, code, status)


class RuntimeClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 2.0,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=self._timeout
        )
        self._async: aiohttp.ClientSession | None = None
        self._async_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=timeout_s
        )
        self.system_prompt = system_prompt
        self._lock = threading.Lock()
        self._runtime_id: str | None = None
        self._model: p.ModelInfo | None = None
        self._composer: PromptComposer | None = None
        self._tokenizer: TextTokenizer | None = None

    # ---- plumbing ------------------------------------------------------------------------
    def _seen(self, response: httpx.Response) -> None:
        self._seen_headers(response.headers)  # a (re)started runtime: forget its model

    def _request(self, method: str, path: str, body: BaseModel | None = None) -> httpx.Response:
        content = p.wire(body) if body is not None else None
        headers = {"content-type": "application/json"} if content else None
        try:
            response = self._http.request(method, path, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise _unreachable(self.base_url, exc) from exc
        self._seen(response)
        _raise_for(response)
        return response

    def _session(self) -> aiohttp.ClientSession:
        """One session per client (created in the event loop that first streams)."""
        if self._async is None or self._async.closed:
            self._async = aiohttp.ClientSession(
                headers={**self._headers, "content-type": "application/json"},
                timeout=self._async_timeout,
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            )
        return self._async

    def _seen_headers(self, headers: Any) -> None:
        runtime_id = headers.get(p.RUNTIME_ID_HEADER)
        if runtime_id and runtime_id != self._runtime_id:
            with self._lock:
                if runtime_id != self._runtime_id:
                    self._runtime_id, self._model, self._composer = runtime_id, None, None
                    self._tokenizer = None

    @property
    def runtime_id(self) -> str | None:
        """The instance id the runtime last answered with (``None`` before any answer)."""
        return self._runtime_id

    def close(self) -> None:
        self._http.close()

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.close()
            self._async = None

    # ---- model ---------------------------------------------------------------------------
    def ready(self) -> bool:
        try:
            response = self._http.get("/readyz", timeout=2.0)
        except httpx.TransportError:
            return False
        self._seen(response)
        return response.status_code == 200

    def model(self) -> p.ModelInfo:
        model = self._model
        if model is None:
            model = p.ModelInfo.model_validate_json(self._request("GET", "/v1/model").content)
            with self._lock:
                self._model = model
        return model

    def composer(self) -> PromptComposer:
        """The composer for the served model's tokenizer and chat template (fetched once per
        runtime instance)."""
        composer = self._composer
        if composer is None:
            model = self.model()
            tokenizer = self.tokenizer()
            template = ChatTemplate(model.chat_template, model.special_tokens)
            composer = PromptComposer(tokenizer.encode, template, self.system_prompt)
            with self._lock:
                self._composer = composer
        return composer

    def tokenizer(self) -> TextTokenizer:
        """The served model's tokenizer (fetched once per runtime instance)."""
        tokenizer = self._tokenizer
        if tokenizer is None:
            tokenizer = TextTokenizer(self._request("GET", "/v1/tokenizer").text)
            with self._lock:
                self._tokenizer = tokenizer
        return tokenizer

    def _text_stream(self, request: p.GenerateRequest) -> TextStream | None:
        """This client decodes a stream's text itself (the runtime sends token ids only, protocol
        revision 6) when the runtime serves that revision, its tokenizer is already here (never
        a blocking fetch on the event loop: the composer fetched it) and no stop string or stop
        token id needs the runtime's own text. Why: the runtime is one process with one event
        loop for every stream, the API many; vLLM's detokenizer took 16% of that loop at 100
        users on the H200 (docs/benchmarks.md, run 11)."""
        s, model, tokenizer = request.sampling, self._model, self._tokenizer
        if not s.detokenize or s.stop or s.stop_token_ids or tokenizer is None:
            return None
        if model is None or model.protocol_revision < 6:
            return None
        return tokenizer.stream(request.token_ids)

    def _for_runtime(self, request: p.GenerateRequest) -> p.GenerateRequest:
        """``request`` in a form the runtime accepts: a segment's rows (revision 7) go as spans
        to an earlier runtime, or to one whose revision this client has not read yet."""
        model = self._model
        return p.for_revision(request, model.protocol_revision if model is not None else 1)

    # ---- calls ---------------------------------------------------------------------------
    def generate(self, request: p.GenerateRequest) -> Iterator[p.GenerateEvent]:
        """The events of one generation; raises ``RuntimeStreamError`` if it ends badly once
        the runtime has answered, and ``RuntimeUnavailableError`` if it never answered."""
        answered = False
        request = self._for_runtime(request)
        try:
            with self._http.stream(
                "POST", "/v1/generate", content=p.wire(request),
                headers={"content-type": "application/json"},
            ) as response:  # fmt: skip
                answered = True
                self._seen(response)
                if response.status_code >= 400:
                    response.read()
                    _raise_for(response)
                yield from read_events(response.iter_lines())
        except httpx.TransportError as exc:
            if not answered:
                raise _unreachable(self.base_url, exc) from exc
            raise RuntimeStreamError(f"the runtime went away: {exc}", "unreachable") from exc

    async def agenerate(
        self, request: p.GenerateRequest, request_id: str | None = None
    ) -> AsyncIterator[p.GenerateEvent]:
        """As ``generate``; the text is decoded here where the runtime can leave it to us.
        ``request_id``: the caller's id of the request (the runtime tracks it by that name)."""
        url = f"{self.base_url}/v1/generate"
        answered = False
        request = self._for_runtime(request)
        text = self._text_stream(request)
        if text is not None:
            sampling = request.sampling.model_copy(update={"detokenize": False})
            request = request.model_copy(update={"sampling": sampling})
        try:
            headers = {REQUEST_ID_HEADER: request_id} if request_id else None
            async with self._session().post(url, data=p.wire(request), headers=headers) as response:
                answered = True
                self._seen_headers(response.headers)
                if response.status >= 400:
                    _raise_status(response.status, await response.read())
                reader = EventReader()
                async for data in response.content.iter_any():  # all that has arrived
                    for event in reader.feed(data):
                        if text is not None and event.event == "delta":
                            event.text = text.step(event.token_ids)
                        yield event
                for event in reader.finish():
                    yield event
        except (aiohttp.ClientError, TimeoutError) as exc:
            if not answered:
                # No answer at all: a refused connection, or a pooled one to a runtime that has
                # since died (reset on write). Nothing was streamed, so the caller may say
                # "unavailable" (and try another replica), not "the stream broke".
                raise _unreachable(self.base_url, exc) from exc
            raise RuntimeStreamError(f"the runtime went away: {exc!r}", "unreachable") from exc

    def encode(self, request: p.EncodeRequest) -> p.EncodeResult:
        return p.EncodeResult.model_validate_json(
            self._request("POST", "/v1/encode", request).content
        )

    def purge(self, request: p.PurgeRequest) -> p.PurgeResult:
        return p.PurgeResult.model_validate_json(
            self._request("POST", "/v1/purge", request).content
        )

    def prefetch(self, request: p.KeysRequest) -> None:
        self._request("POST", "/v1/prefetch", request)

    async def aprefetch(self, request: p.KeysRequest) -> None:
        """A hint: never raises (the request itself loads what it needs)."""
        try:
            url = f"{self.base_url}/v1/prefetch"
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with self._session().post(url, data=p.wire(request), timeout=timeout):
                return
        except (aiohttp.ClientError, TimeoutError):
            return

    def placement(self, request: p.KeysRequest) -> list[str | None]:
        response = self._request("POST", "/v1/placement", request)
        return list(p.PlacementResult.model_validate_json(response.content).tiers)

    def demote(self, request: p.DemoteRequest) -> None:
        self._request("POST", "/v1/demote", request)

    def contains(self, request: p.KeysRequest) -> list[bool]:
        response = self._request("POST", "/v1/contains", request)
        return p.ContainsResult.model_validate_json(response.content).present

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """[len(texts), dim] float32 query embeddings from the runtime's device (revision 3)."""
        response = self._request("POST", "/v1/embed", p.EmbedRequest(texts=texts))
        result = p.EmbedResult.model_validate_json(response.content)
        raw = np.frombuffer(base64.b64decode(result.vectors_b64), dtype="<f4")
        if raw.size != len(texts) * result.dim:
            raise RuntimeRejectedError(
                f"the runtime sent {raw.size} floats for {len(texts)} x {result.dim}", "bad_embed"
            )
        return raw.astype(np.float32).reshape(len(texts), result.dim)

    def trace(self, reset: bool = False) -> p.TraceResult:
        response = self._request("POST", "/v1/trace", p.TraceRequest(reset=reset))
        return p.TraceResult.model_validate_json(response.content)

    def stats(self, tenant: str | None = None) -> p.StatsResult:
        path = "/v1/stats" + (f"?{httpx.QueryParams({'tenant': tenant})}" if tenant else "")
        return p.StatsResult.model_validate_json(self._request("GET", path).content)


__all__ = [
    "RuntimeClient",
    "RuntimeClientError",
    "RuntimeNotListeningError",
    "RuntimeRejectedError",
    "RuntimeStreamError",
    "RuntimeUnavailableError",
]
