"""The hand-written delta lines are the protocol's ``GenerateEvent``, and the client reads them
back as the model would."""

from __future__ import annotations

import json

import pytest

from gpu_runtime.client import protocol as p
from gpu_runtime.client.events import parse_event
from gpu_runtime.generation import Delta
from gpu_runtime.server.routes import delta_line

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "delta",
    [
        Delta((17,), "Hi", None),
        Delta((1, 2), 'quote " and ünïcödé\n', None),
        Delta((5,), "", (((5, -0.25), (9, -1.5)),)),
    ],
)
def test_delta_lines_are_protocol_events(delta: Delta) -> None:
    line = delta_line(delta)
    assert line.endswith("\n") and "\n" not in line[:-1]
    model = p.GenerateEvent.model_validate(json.loads(line))  # what the schema says
    read = parse_event(line)
    assert read is not None
    for event in (model, read):
        assert event.event == "delta" and event.text == delta.text
        assert tuple(event.token_ids) == delta.token_ids
        expected = [list(step) for step in delta.logprobs] if delta.logprobs else None
        assert event.logprobs == expected


def test_error_lines_raise_and_done_lines_validate() -> None:
    from gpu_runtime.client.errors import RuntimeStreamError

    with pytest.raises(RuntimeStreamError, match="boom"):
        parse_event('{"event":"error","code":"engine_dead","message":"boom"}')
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "cached_tokens": 2,
             "injected_tokens": 2, "prefilled_tokens": 1}  # fmt: skip
    done = parse_event(json.dumps({"event": "done", "finish_reason": "length", "usage": usage}))
    assert done is not None and done.usage is not None and done.usage.injected_tokens == 2
    assert parse_event("   ") is None


def test_token_ids_only_cannot_carry_stop_strings() -> None:
    from pydantic import ValidationError

    assert not p.SamplingModel(detokenize=False).detokenize
    for stops in ({"stop": ["\n"]}, {"stop_token_ids": [2]}):
        with pytest.raises(ValidationError, match="need 'detokenize': true"):
            p.SamplingModel(detokenize=False, **stops)


def test_requests_leave_defaults_out_so_an_earlier_runtime_serves_them() -> None:
    """A revision-5 runtime refuses ``detokenize`` as an unknown field: the client sends it
    only when it asks for something other than the default."""
    request = p.GenerateRequest(
        tenant="t", token_ids=[1, 2], mode="prompt", sampling=p.SamplingModel(max_tokens=8)
    )
    body = json.loads(p.wire(request))
    assert body == {
        "tenant": "t",
        "token_ids": [1, 2],
        "mode": "prompt",
        "sampling": {"max_tokens": 8},
    }
    assert p.GenerateRequest.model_validate_json(p.wire(request)) == request
    ids_only = request.model_copy(update={"sampling": p.SamplingModel(detokenize=False)})
    assert json.loads(p.wire(ids_only))["sampling"] == {"detokenize": False}
