"""What the FAISS indexes accept: fact ids, revisions and unit-length float32 vectors, checked
before they reach FAISS (which would take a wrong dtype, a NaN or a negative id silently)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

INT64_MAX = int(np.iinfo(np.int64).max)
# Vectors must be unit length for inner product to be cosine; this absorbs float32 rounding only.
NORM_TOLERANCE = 1e-3


def fact_id(value: int) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(f"fact id must be an int, got {type(value).__name__}")
    checked = int(value)
    # FAISS reports "no result" as id -1, so negative ids could not be told apart from it.
    if not 0 <= checked <= INT64_MAX:
        raise ValueError(f"fact id must be in [0, 2**63 - 1], got {checked}")
    return checked


def fact_ids(ids: Sequence[int]) -> npt.NDArray[np.int64]:
    if isinstance(ids, str | bytes):
        raise ValueError("ids must be a sequence of ints")
    values = [fact_id(value) for value in ids]
    if len(set(values)) != len(values):
        raise ValueError("ids contain duplicates")
    return np.array(values, dtype=np.int64)


def revision(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"revision must be an int, got {type(value).__name__}")
    return value


def matrix(vectors: Any, rows: int, dim: int, *, name: str) -> npt.NDArray[np.float32]:
    """A C-contiguous float32 [rows, dim] array of finite unit-length rows, or ValueError."""
    if not isinstance(vectors, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(vectors).__name__}")
    if vectors.dtype != np.float32:
        raise ValueError(f"{name} must be float32, got {vectors.dtype}")
    if vectors.shape != (rows, dim):
        raise ValueError(f"{name} must have shape {(rows, dim)}, got {vectors.shape}")
    if rows == 0:
        return np.ascontiguousarray(vectors)
    if not np.isfinite(vectors).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1)
    bad = np.flatnonzero(np.abs(norms - 1.0) > NORM_TOLERANCE)
    if bad.size:
        raise ValueError(
            f"{name} row {int(bad[0])} has L2 norm {float(norms[bad[0]]):.4f}; "
            "vectors must be L2-normalised so that inner product is cosine"
        )
    return np.ascontiguousarray(vectors)


def query(vector: Any, dim: int, *, name: str) -> npt.NDArray[np.float32]:
    """One vector as [dim] or [1, dim]; returned as a checked [1, dim] array."""
    if isinstance(vector, np.ndarray) and vector.ndim == 1:
        vector = vector.reshape(1, -1)
    return matrix(vector, 1, dim, name=name)
