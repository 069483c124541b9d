"""The served model's tokenizer, from its ``tokenizer.json`` (the Rust ``tokenizers`` library).

Text is encoded without the tokenizer's post-processor (no BOS/EOS added): the chat template
writes every special token out, exactly as vLLM's chat path does with ``add_special_tokens=False``.
Special tokens in the text are recognised as such.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

# tokenizers' message when a decode stream's UTF-8 prefix breaks (vLLM resets the stream then)
INVALID_PREFIX = "Invalid prefix encountered"
# Prompt tokens a text stream is primed with. vLLM primes with the whole prompt, and its first
# step then decodes all of it (1 ms at 1,700 tokens on the CPU box): only the last tokens shape
# the next token's text (its leading space, a character cut across tokens), and a prompt ends
# with the chat template's assistant header, so 32 give the same text (the engine test checks
# it against vLLM's own) for 0.05 ms.
PRIME_TOKENS = 32


class TextTokenizer:
    def __init__(self, tokenizer_json: str) -> None:
        self._tokenizer = Tokenizer.from_str(tokenizer_json)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, token_ids: list[int]) -> str:
        text: str = self._tokenizer.decode(token_ids, skip_special_tokens=True)
        return text

    def stream(self, prompt_ids: Sequence[int]) -> TextStream:
        """A generation's text, token by token, as the runtime's vLLM would have streamed it."""
        return TextStream(self._tokenizer, prompt_ids)

    def token_texts(self, token_ids: list[int]) -> list[str]:
        """Each token's own text, special tokens included (per-token logprobs name them)."""
        return [self._tokenizer.decode([i], skip_special_tokens=False) for i in token_ids]


class TextStream:
    """Incremental detokenization on the client, step for step what vLLM's
    ``FastIncrementalDetokenizer`` does in the runtime's process (0.26 and 0.32 alike): a
    ``DecodeStream`` primed with the prompt's last ids (so the first token's leading space is
    read in context), special tokens skipped, the stream restarted when tokenizers reports a broken
    UTF-8 prefix. Requests asked with ``detokenize: false`` (protocol revision 6) carry no stop
    strings or stop token ids, so nothing is held back and no token is left undecoded; the
    end-of-sequence token is a special token, which decodes to nothing either way."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self._stream = DecodeStream(ids=list(prompt_ids[-PRIME_TOKENS:]), skip_special_tokens=True)

    def step(self, token_ids: Sequence[int]) -> str:
        """The text that ``token_ids`` (the next ones generated) add."""
        return "".join(self._one(token_id) for token_id in token_ids)

    def _one(self, token_id: int) -> str:
        try:
            return self._stream.step(self._tokenizer, token_id) or ""
        except (OverflowError, TypeError):  # an id outside the vocabulary: no text, as vLLM
            return ""
        except Exception as exc:
            if not str(exc).startswith(INVALID_PREFIX):
                raise
            self._stream = DecodeStream(skip_special_tokens=True)
            return self._stream.step(self._tokenizer, token_id) or ""
