"""What clients need to compose prompts for the served model: its tokenizer, chat template and
special tokens, read from the tokenizer directory (or a template file, as vLLM's
``--chat-template``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_runtime.errors import ModelAssetError

SPECIAL_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token")


@dataclass(frozen=True)
class TokenizerAssets:
    tokenizer_json: str
    sha256: str
    chat_template: str
    special_tokens: dict[str, str]


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def load_assets(tokenizer_dir: Path, chat_template: Path | None = None) -> TokenizerAssets:
    tokenizer_file = tokenizer_dir / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ModelAssetError(f"no tokenizer.json in {tokenizer_dir}")
    text = tokenizer_file.read_text()
    config_file = tokenizer_dir / "tokenizer_config.json"
    config: dict[str, Any] = json.loads(config_file.read_text()) if config_file.is_file() else {}
    if chat_template is not None:
        template = chat_template.read_text()
    elif (tokenizer_dir / "chat_template.jinja").is_file():
        template = (tokenizer_dir / "chat_template.jinja").read_text()
    elif isinstance(config.get("chat_template"), str):
        template = str(config["chat_template"])
    else:
        raise ModelAssetError(
            f"{tokenizer_dir} has no chat template; set INFERSCALE_CHAT_TEMPLATE to a file"
        )
    special = {name: t for name in SPECIAL_TOKENS if (t := _token_text(config.get(name)))}
    return TokenizerAssets(text, hashlib.sha256(text.encode()).hexdigest(), template, special)
