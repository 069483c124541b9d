"""The hand-written delta lines are the protocol's ``GenerateEvent``, and the client reads them
back as the model would."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

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


SPANS = [("preamble:abc", 0, 0, 1, 0, 12), ("f1", 2, 0, 1, 12, 7), ("f2", 1, 0, 1, 19, 5)]


def _kv(**segment: object) -> p.GenerateRequest:
    return p.GenerateRequest(
        tenant="t", token_ids=list(range(30)), mode="kv", segment={"window": 0, "version": 1,
                                                                   **segment}
    )  # fmt: skip


def test_a_segment_as_rows_and_as_spans_is_the_same_segment() -> None:
    as_rows = _kv(rows=SPANS)
    as_spans = p.for_revision(as_rows, 6)
    assert as_spans.segment is not None and as_rows.segment is not None
    assert as_spans.segment.rows == [] and len(as_spans.segment.spans) == 3
    assert as_spans.segment.span_rows() == as_rows.segment.span_rows() == SPANS
    assert p.for_revision(as_rows, 7) is as_rows  # a revision-7 runtime takes the rows
    # what each form puts on the wire, read back as the runtime reads it
    for request in (as_rows, as_spans):
        read = p.GenerateRequest.model_validate_json(p.wire(request))
        assert read.segment is not None and read.segment.span_rows() == SPANS
    assert "spans" not in json.loads(p.wire(as_rows))["segment"]  # a revision-6 runtime
    assert "rows" not in json.loads(p.wire(as_spans))["segment"]  # refuses what it lacks


@pytest.mark.parametrize(
    ("segment", "wrong"),
    [
        ({"rows": SPANS, "spans": [{"fact_id": "f", "fact_version": 0, "window": 0,
                                    "encoding_version": 1, "start": 0, "n_tokens": 1}]},
         "not both"),
        ({"rows": [("f", 0, 0, 1, 0, 0)]}, "greater than or equal to 1"),  # n_tokens
        ({"rows": [("f", -1, 0, 1, 0, 3)]}, "greater than or equal to 0"),  # fact_version
        ({"rows": [("", 0, 0, 1, 0, 3)]}, "at least 1 character"),  # fact_id
        ({"rows": [("f", 0, 0, 1, 0)]}, "Field required"),  # a field short
    ],
)  # fmt: skip
def test_segment_rows_are_validated_as_spans_are(segment: dict[str, object], wrong: str) -> None:
    with pytest.raises(ValidationError, match=wrong):
        _kv(**segment)
