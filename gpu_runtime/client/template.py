"""Chat templates rendered as Hugging Face ``apply_chat_template`` renders them (torch-free).

Same Jinja environment: sandboxed, ``trim_blocks`` and ``lstrip_blocks``, loop controls, the
``raise_exception`` and ``strftime_now`` globals, a ``tojson`` filter that keeps non-ASCII text,
and the tokenizer's special tokens (``bos_token``, ``eos_token``, ...) as variables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"  # templates the project ships


class ChatTemplateError(ValueError):
    """The template failed to render, or cannot be used for composing (see the message)."""


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def shipped(name: str) -> str:
    """A template file the project ships (``gpu_runtime/templates/<name>.jinja``)."""
    return (TEMPLATES / f"{name}.jinja").read_text()


class ChatTemplate:
    def __init__(self, source: str, special_tokens: Mapping[str, str] | None = None) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template does not parse: {exc}") from exc
        self.source = source
        self._variables = dict(special_tokens or {})

    def render(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                **self._variables,
            )
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc
