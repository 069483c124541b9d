"""Composing with the served model's chat template: SmolLM2's (ChatML) and the Llama-3 template
the project ships. The composer is tokenizer-agnostic; a character-level encoding makes every
token visible here (the real tokenizer is checked in ``test_tokenizer.py``)."""

from __future__ import annotations

import pytest

from gpu_runtime.client.composer import FactText, PromptComposer, Turn
from gpu_runtime.client.template import ChatTemplate, ChatTemplateError, shipped
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

TURNS = [Turn("A" if i % 2 else "B", f"turn {i}") for i in range(7)]
T = TenantId("t")
CFG = EncodingConfig("m", 0, 1)
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def _text(ids: tuple[int, ...] | list[int]) -> str:
    return "".join(map(chr, ids))


def _composer(template: str, **special: str) -> PromptComposer:
    return PromptComposer(_chars, ChatTemplate(template, special), "Be helpful.")


def _facts(*texts: str) -> list[FactText]:
    return [FactText(FactKey.for_fact(T, f"f{i}", 1, CFG), t) for i, t in enumerate(texts)]


@pytest.mark.parametrize(
    ("turns", "window", "expected"),
    [
        (7, 5, [2, 3, 4, 5, 6]),
        (3, 5, [0, 1, 2]),  # fewer turns than w: all of them, none dropped
        (4, 5, [0, 1, 2, 3]),
        (7, 0, []),
        (0, 5, []),
    ],
)
def test_last_turns_keeps_the_window_before_the_fact(
    turns: int, window: int, expected: list[int]
) -> None:
    chosen = PromptComposer.last_turns(TURNS[:turns], window)
    assert [t.text for t in chosen] == [f"turn {i}" for i in expected]


def test_smollm2_template_gives_chatml_around_the_facts() -> None:
    composer = _composer(SMOLLM2)
    prompt = composer.compose(
        T, CFG, _facts("The user has a dog.", "The user lives in Lisbon."),
        [("user", "Hi"), ("assistant", "Hello!")], "What pet do I have?",
    )  # fmt: skip
    assert _text(prompt.token_ids) == (
        "<|im_start|>system\nBe helpful.\nFacts about the user:\n"
        "The user has a dog.\nThe user lives in Lisbon.\n<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWhat pet do I have?<|im_end|>\n<|im_start|>assistant\n"
    )
    preamble, first, second = prompt.segment.spans
    assert _text(prompt.token_ids[: preamble.end]).endswith("Facts about the user:\n")
    assert _text(prompt.token_ids[first.start : first.end]) == "The user has a dog.\n"
    assert second.start == first.end and prompt.segment.end == second.end


def test_llama3_template_renders_its_own_markup() -> None:
    composer = _composer(shipped("llama3"), bos_token="<|begin_of_text|>")
    prompt = composer.compose(T, CFG, _facts("The user has a dog."), [], "What pet?")
    text = _text(prompt.token_ids)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe helpful.\n"
        "Facts about the user:\nThe user has a dog.\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat pet?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert "<|im_start|>" not in text


@pytest.mark.parametrize("template", [SMOLLM2, shipped("llama3"), shipped("chatml")])
def test_a_facts_tokens_are_the_same_in_every_prompt_and_encoding(template: str) -> None:
    composer = _composer(template, bos_token="<s>")
    fact = "Caroline moved to Sweden in 2019."
    fact_text = FactText(FactKey.for_fact(T, "x", 1, CFG), fact)
    prompts = [
        composer.compose(T, CFG, [*_facts("Another fact."), fact_text], [], "Where?"),
        composer.compose(T, CFG, [fact_text], [("user", "hey")], "When?", system="Be brief."),
    ]
    expected = composer.fact_tokens(fact)
    for prompt in prompts:
        span = next(s for s in prompt.segment.spans if s.key == fact_text.key)
        assert prompt.token_ids[span.start : span.end] == expected
    item = composer.encode_item(fact_text.key, fact, TURNS, 2)
    assert item.token_ids[item.span.start : item.span.end] == expected
    window = _text(item.token_ids[: item.span.start])
    assert "turn 5" in window and "turn 6" in window and "turn 4" not in window
    assert window.endswith("Facts about the user:\n")


def test_window_zero_encodes_after_exactly_the_serving_preamble() -> None:
    """At w=0 a fact is encoded after the very tokens that precede it when served first."""
    composer = _composer(SMOLLM2)
    fact = _facts("The user has a dog.")
    item = composer.encode_item(fact[0].key, fact[0].text, TURNS, 0)
    prompt = composer.compose(T, CFG, fact, [], "What pet?")
    span = prompt.segment.spans[1]
    assert item.token_ids == prompt.token_ids[: span.end] and item.span.start == span.start


def test_a_fact_context_goes_between_the_preamble_and_the_fact_when_encoding_only() -> None:
    composer = _composer(SMOLLM2)
    composer.fact_context = "Earlier facts.\n"  # what an evaluation may try
    fact = _facts("The user has a dog.")
    item = composer.encode_item(fact[0].key, fact[0].text, TURNS, 0)
    prompt = composer.compose(T, CFG, fact, [], "What pet?")
    preamble, span = prompt.segment.spans
    context = composer.tokens("Earlier facts.\n")
    assert item.token_ids[: item.span.start] == prompt.token_ids[: preamble.end] + context
    assert item.token_ids[item.span.start :] == prompt.token_ids[span.start : span.end]
    assert "Earlier facts." not in _text(prompt.token_ids)


def test_the_preamble_key_follows_the_system_prompt() -> None:
    composer = _composer(SMOLLM2)
    a = composer.compose(T, CFG, [], [], "q")
    b = composer.compose(T, CFG, [], [], "q", system="Another system prompt.")
    assert a.segment.spans[0].key != b.segment.spans[0].key
    assert composer.compose(T, CFG, [], [], "other q").segment.spans[0] == a.segment.spans[0]


@pytest.mark.parametrize("template", [SMOLLM2, shipped("llama3"), shipped("chatml")])
@pytest.mark.parametrize("system", [None, "Another system prompt."])
def test_the_hints_preamble_key_is_the_composed_prompts(template: str, system: str | None) -> None:
    """The chat names the preamble in its prefetch hint before composing: the key must be the
    one the composed segment starts with, whatever history and query follow."""
    composer = _composer(template, bos_token="<s>")
    history = [("user", "hi"), ("assistant", "hello")]
    for turns in ([], history):
        prompt = composer.compose(T, CFG, _facts("A fact."), turns, "Where?", system=system)
        assert composer.preamble_key(T, CFG, system) == prompt.segment.spans[0].key
    assert composer.preamble_key(T, CFG, system) != composer.preamble_key(T, CFG, "Other.")


def test_a_template_that_rewrites_the_system_message_is_refused() -> None:
    rewrites = "{% for m in messages %}{{ m['content'] | upper }}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="verbatim"):
        _composer(rewrites).compose(T, CFG, [], [], "q")
    with pytest.raises(ChatTemplateError, match="failed"):
        _composer("{{ raise_exception('no system role') }}").compose(T, CFG, [], [], "q")


@pytest.mark.parametrize("injected", [0, 1, 2, 3])
def test_hybrid_segment_covers_the_first_facts_and_leaves_the_token_ids_alone(
    injected: int,
) -> None:
    """Hybrid injection: the segment is the preamble and the first ``injected`` facts, a
    contiguous prefix; the facts after it are in the prompt as text, the ids as in kv mode."""
    composer = _composer(SMOLLM2)
    facts = _facts("least relevant.", "middle.", "most relevant.")
    full = composer.compose(T, CFG, facts, [], "q?")
    hybrid = composer.compose(T, CFG, facts, [], "q?", injected=injected)
    assert hybrid.token_ids == full.token_ids
    assert hybrid.segment.spans == full.segment.spans[: 1 + injected]
    assert [s.key for s in hybrid.segment.spans[1:]] == [f.key for f in facts[:injected]]
    tail = _text(hybrid.token_ids[hybrid.segment.end :])
    assert all(f.text in tail for f in facts[injected:])
    assert not any(f.text in tail for f in facts[:injected])


@pytest.mark.parametrize("injected", [-1, 4])
def test_hybrid_cannot_inject_more_facts_than_it_has(injected: int) -> None:
    with pytest.raises(ValueError, match="injected"):
        _composer(SMOLLM2).compose(T, CFG, _facts("a.", "b.", "c."), [], "q", injected=injected)


def test_a_facts_tokens_are_computed_once_per_tenant_and_text() -> None:
    calls: list[str] = []

    def counting(text: str) -> list[int]:
        calls.append(text)
        return _chars(text)

    composer = PromptComposer(counting, ChatTemplate(SMOLLM2, {}), "Be helpful.")
    facts = _facts("likes tea", "lives in Porto")
    first = composer.compose(T, CFG, facts, [], "q?")
    facts_tokenized = sum("likes tea" in c or "lives in Porto" in c for c in calls)
    again = composer.compose(T, CFG, facts, [], "another q?")
    assert sum("likes tea" in c or "lives in Porto" in c for c in calls) == facts_tokenized == 2
    assert again.segment.spans[1:] == first.segment.spans[1:]  # the same ids, from the cache
    other = TenantId("other")
    composer.compose(other, CFG, [FactText(FactKey.for_fact(other, "f0", 1, CFG), "likes tea")],
                     [], "q?")  # fmt: skip
    assert sum("likes tea" in c for c in calls) == 2  # another tenant's same text: its own
