"""The served model's tokenizer, from its ``tokenizer.json`` (the Rust ``tokenizers`` library).

Text is encoded without the tokenizer's post-processor (no BOS/EOS added): the chat template
writes every special token out, exactly as vLLM's chat path does with ``add_special_tokens=False``.
Special tokens in the text are recognised as such.
"""

from __future__ import annotations

from tokenizers import Tokenizer


class TextTokenizer:
    def __init__(self, tokenizer_json: str) -> None:
        self._tokenizer = Tokenizer.from_str(tokenizer_json)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, token_ids: list[int]) -> str:
        text: str = self._tokenizer.decode(token_ids, skip_special_tokens=True)
        return text

    def token_texts(self, token_ids: list[int]) -> list[str]:
        """Each token's own text, special tokens included (per-token logprobs name them)."""
        return [self._tokenizer.decode([i], skip_special_tokens=False) for i in token_ids]
