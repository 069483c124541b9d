"""all-MiniLM-L6-v2 in NumPy: the sentence-transformers pipeline (BERT, mean pooling, L2 norm)
without torch, so the API and the workers never load it.

The weights and tokenizer are the model's own files (safetensors, ``tokenizer.json``); the
forward pass is BERT's, in float32: embeddings + LayerNorm, six post-norm encoder layers (12-head
self-attention, exact-erf GELU feed-forward), then the mean over real tokens. A test checks the
vectors against sentence-transformers on the same texts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file
from tokenizers import Tokenizer

Array = npt.NDArray[np.float32]


def _erf(x: Array) -> Array:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32's resolution near 1)."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                + t * 1.061405429))))  # fmt: skip
    out: Array = (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)
    return out


def _gelu(x: Array) -> Array:
    out: Array = (0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))).astype(np.float32)
    return out


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: Array = ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32)
    return out


class MiniLM:
    def __init__(self, model_dir: Path) -> None:
        config = json.loads((model_dir / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.dim = int(config["hidden_size"])
        st_config = model_dir / "sentence_bert_config.json"
        max_len = 256
        if st_config.is_file():
            max_len = int(json.loads(st_config.read_text())["max_seq_length"])
        weights = load_file(model_dir / "model.safetensors")
        self.w = {k: v.astype(np.float32) for k, v in weights.items() if v.dtype != np.int64}
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(int(max_len))
        self.tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)))

    def _linear(self, x: Array, name: str) -> Array:
        """x [B, L, in] -> [B, L, out]; one GEMM over all tokens (weights are [out, in])."""
        flat = x.reshape(-1, x.shape[-1]) @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]
        return flat.reshape(*x.shape[:-1], -1)

    def encode(self, texts: list[str]) -> Array:
        """[len(texts), dim] float32, L2-normalised: the model's sentence embeddings."""
        batch = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in batch], dtype=np.int64)  # [B, L]
        mask = np.array([e.attention_mask for e in batch], dtype=np.float32)  # [B, L]
        types = np.array([e.type_ids for e in batch], dtype=np.int64)  # [B, L]
        w, n, length = self.w, self.heads, ids.shape[1]
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(length)][None]
            + w["embeddings.token_type_embeddings.weight"][types]
        )  # [B, L, D]
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]  # [B, 1, 1, L]: padding
        head = self.dim // n
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t: Array) -> Array:
                return t.reshape(t.shape[0], length, n, head).transpose(0, 2, 1, 3)  # [B, H, L, d]

            q = split(self._linear(x, f"{p}.attention.self.query"))
            k = split(self._linear(x, f"{p}.attention.self.key"))
            v = split(self._linear(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head)) + blocked  # [B,H,L,L]
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)  # [B, L, D]
            attended = self._linear(context, f"{p}.attention.output.dense")
            x = _layer_norm(x + attended, w[f"{p}.attention.output.LayerNorm.weight"],
                            w[f"{p}.attention.output.LayerNorm.bias"], self.eps)  # fmt: skip
            hidden = _gelu(self._linear(x, f"{p}.intermediate.dense"))  # [B, L, 4D]
            out = self._linear(hidden, f"{p}.output.dense")
            x = _layer_norm(x + out, w[f"{p}.output.LayerNorm.weight"],
                            w[f"{p}.output.LayerNorm.bias"], self.eps)  # fmt: skip
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(pooled / norms, dtype=np.float32)
