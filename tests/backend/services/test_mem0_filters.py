"""Mem0's filter language: what compiles, and every malformed filter refused with a message
(what filters select on real rows is tests/backend/api/test_mem0_sdk.py)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects import postgresql

from backend.services.mem0_filters import FilterError, compile_filter, mentions_entity

pytestmark = pytest.mark.unit


def _sql(filters: dict[str, Any]) -> str:
    condition = compile_filter(filters)
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    return str(condition.compile(dialect=dialect))


def test_logical_operators_nest() -> None:
    sql = _sql({"AND": [{"user_id": "a"}, {"OR": [{"agent_id": "x"}, {"NOT": {"run_id": "*"}}]}]})
    # NOT (run_id is any value) is "run_id IS NULL" once SQLAlchemy simplifies it.
    assert " AND " in sql and " OR " in sql and "facts.run_id IS NULL" in sql
    assert _sql({"user_id": "a", "app_id": "b"}).count(" AND ") == 1  # siblings: all of them


def test_several_operators_on_one_field_all_hold() -> None:
    sql = _sql({"created_at": {"gte": "2024-01-01", "lte": "2024-01-31"}})
    assert sql.count("facts.created_at") == 2 and " AND " in sql


def test_whole_day_bounds() -> None:
    sql = _sql({"created_at": {"lte": "2024-07-31"}})
    assert "created_at <" in sql and "<=" not in sql  # before the next day: the whole day in


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({}, "non-empty"),
        ({"colour": "red"}, "unknown filter key"),
        ({"user_id": {"gte": "a"}}, "operator 'gte'"),
        ({"user_id": 5}, "expected a string"),
        ({"user_id": {"in": []}}, "'in' takes a list"),
        ({"created_at": {"gte": "yesterday"}}, "is not a date"),
        ({"created_at": {"gte": True}}, "expected an ISO date"),
        ({"metadata": "x"}, "top-level keys"),
        ({"metadata": {"k": {"gt": 1}}}, "operator 'gt'"),
        ({"memory_ids": ["nope"]}, "not a memory id"),
        ({"AND": []}, "at least one filter"),
        ({"OR": ["x"]}, "non-empty object"),
        ({"metadata": {"k": {"eq": "a", "ne": "b"}}}, "one operator"),
        ({"created_at": {"gte": "2024-01-01", "below": "2024-02-01"}}, "operator 'below'"),
        ({"categories": "x"}, "categories"),
        ({"keywords": "x"}, "keywords"),
    ],
)
def test_malformed_filters_are_refused(filters: dict[str, Any], message: str) -> None:
    with pytest.raises(FilterError, match=message):
        compile_filter(filters)


def test_entity_required_anywhere() -> None:
    assert mentions_entity({"AND": [{"metadata": {"k": 1}}, {"OR": [{"run_id": "r"}]}]})
    assert not mentions_entity({"metadata": {"user_id": "x"}})  # a metadata key is no entity
    assert not mentions_entity({"created_at": {"gte": "2024-01-01"}})
