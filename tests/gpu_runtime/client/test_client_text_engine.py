"""Protocol revision 6: the runtime streams token ids only and the API's client decodes them.
Against the real engine, the client's text is the text vLLM's own detokenizer streams for the
same request (multi-byte characters, leading spaces), and requests whose stop strings need the
runtime's text keep it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gpu_runtime.client import protocol as p
from gpu_runtime.types import TenantId
from tests.support import EngineHarness

pytestmark = pytest.mark.engine

QUESTIONS = [
    "Write the word café, a dog emoji and 'hello' in Chinese.",
    "List three Portuguese cities, one per line.",
    "Say something about greyhounds named Bolt.",
]


def _request(runtime: EngineHarness, question: str, **sampling: object) -> p.GenerateRequest:
    tenant = TenantId(f"text-{uuid.uuid4().hex[:8]}")
    prompt = runtime.composer.compose(tenant, runtime.config(0), [], [], question)
    return p.GenerateRequest(
        tenant=tenant.value, token_ids=list(prompt.token_ids), mode="prompt",
        sampling=p.SamplingModel(max_tokens=40, **sampling),
    )  # fmt: skip


async def _streamed(runtime: EngineHarness, request: p.GenerateRequest) -> tuple[list[int], str]:
    ids: list[int] = []
    text = []
    async for event in runtime.client.agenerate(request):
        ids += event.token_ids
        text.append(event.text)
    await runtime.client.aclose()
    return ids, "".join(text)


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_clients_text_is_the_runtimes(runtime: EngineHarness, question: str) -> None:
    request = _request(runtime, question)
    theirs = list(runtime.client.generate(request))  # the runtime's detokenizer (sync client)
    their_ids = [t for e in theirs for t in e.token_ids]
    their_text = "".join(e.text for e in theirs)
    ids_only = request.model_copy(
        update={"sampling": p.SamplingModel(max_tokens=40, detokenize=False)}
    )
    bare = list(runtime.client.generate(ids_only))
    assert [t for e in bare for t in e.token_ids] == their_ids
    assert all(e.text == "" for e in bare)  # the runtime did not decode: the client must
    our_ids, our_text = asyncio.run(_streamed(runtime, request))
    assert our_ids == their_ids
    assert our_text == their_text and their_text.strip()


def test_stop_strings_keep_the_runtimes_text(runtime: EngineHarness) -> None:
    request = _request(runtime, QUESTIONS[1], stop=["\n"])
    theirs = "".join(e.text for e in runtime.client.generate(request))
    _, text = asyncio.run(_streamed(runtime, request))
    assert text == theirs and "\n" not in text
