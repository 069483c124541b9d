"""The runtime is template-agnostic: prompts composed with another family's chat template (the
Llama-3 template the project ships, tokenized by the served model's tokenizer) are injected as
exactly as SmolLM2's own."""

from __future__ import annotations

import uuid

import pytest

from gpu_runtime.client.composer import FactText, PromptComposer
from gpu_runtime.client.template import ChatTemplate, shipped
from gpu_runtime.types import FactKey, TenantId
from tests.support import EngineHarness

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("template", ["served", "llama3"])
def test_one_fact_at_window_zero_kv_equals_prompt_under_each_template(
    runtime: EngineHarness, template: str
) -> None:
    composer = runtime.composer
    if template != "served":
        special = {"bos_token": "<|begin_of_text|>"}
        composer = PromptComposer(composer.tokens, ChatTemplate(shipped(template), special))
    tenant, config = TenantId(f"tpl-{uuid.uuid4().hex[:8]}"), runtime.config(0)
    fact = FactText(FactKey.for_fact(tenant, "dog", 1, config), "The user's dog is named Biscuit.")
    item = composer.encode_item(fact.key, fact.text, (), 0)
    preamble = composer.preamble_tokens()
    # The preamble is encoded by the runtime on first use; the fact by us, as a worker would.
    result = runtime.encode(tenant, [(item.token_ids, [item.span])], config=config)
    assert not result.missing
    prompt = composer.compose(tenant, config, [fact], [], "What is my dog's name?")
    assert prompt.token_ids[: len(preamble)] == preamble
    kv = runtime.generate(tenant, prompt, "kv", max_tokens=12)
    plain = runtime.generate(tenant, prompt, "prompt", max_tokens=12)
    assert kv.injected_tokens == prompt.segment.end
    assert kv.token_ids == plain.token_ids
