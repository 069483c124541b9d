"""The inference job's parsing of the model's JSON and its decisions (the model itself, and the
decisions applied to real memories, are tests/backend/api/test_mem0_sdk.py and
tests/worker/test_inference_job.py)."""

from __future__ import annotations

import json

import pytest

from backend.services import inference as inf

pytestmark = pytest.mark.unit


def test_parse_facts_keeps_known_categories_and_drops_duplicates() -> None:
    output = json.dumps(
        {
            "facts": [
                {"fact": "Likes jazz.", "category": "music"},
                {"fact": "Likes jazz.", "category": "music"},
                {"fact": " Lives in Berlin. ", "category": "made_up"},
                {"fact": "", "category": "misc"},
            ]
        }
    )
    facts = inf.parse_facts(output, list(inf.CATEGORIES))
    assert facts == [("Likes jazz.", "music"), ("Lives in Berlin.", "misc")]


def test_parse_decisions_names_existing_memories_by_index_only() -> None:
    output = json.dumps(
        {
            "memory": [
                {"id": "0", "event": "UPDATE", "text": "Lives in Hamburg."},
                {"id": "1", "event": "DELETE", "text": ""},
                {"id": "2", "event": "ADD", "text": "Has a cat."},
                {"id": "7", "event": "UPDATE", "text": "Invented id: a new fact."},
                {"id": "9", "event": "DELETE", "text": "Invented id: nothing to delete."},
                {"id": "x", "event": "NONE", "text": ""},
            ]
        }
    )
    assert inf.parse_decisions(output, existing=2) == [
        inf.Decision("UPDATE", "Lives in Hamburg.", 0),
        inf.Decision("DELETE", "", 1),
        inf.Decision("ADD", "Has a cat.", None),
        inf.Decision("ADD", "Invented id: a new fact.", None),
    ]


def test_output_that_is_not_the_schema_is_an_error() -> None:
    with pytest.raises(inf.InferenceError):
        inf.parse_facts('{"facts": [', list(inf.CATEGORIES))
    with pytest.raises(inf.InferenceError):
        inf.parse_decisions('{"other": []}', 1)


def test_schemas_bound_what_the_model_may_write() -> None:
    schema = inf.reconcile_schema(existing=2, facts=1)
    item = schema["properties"]["memory"]["items"]
    assert item["properties"]["id"]["enum"] == ["0", "1", "2"]
    assert schema["properties"]["memory"]["maxItems"] == 3
    facts = inf.extraction_schema(["a", "b"])["properties"]["facts"]
    assert facts["maxItems"] == inf.MAX_FACTS
    assert facts["items"]["properties"]["category"]["enum"] == ["a", "b"]
