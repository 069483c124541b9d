"""Mem0's filter language, compiled to a SQL condition on a tenant's facts.

A filter is a JSON object: ``AND`` / ``OR`` (a list of filters), ``NOT`` (a filter or a list,
all negated), or fields, several fields in one object meaning all of them. Fields:

* ``user_id``, ``agent_id``, ``app_id``, ``run_id``: a value (equal), ``"*"`` (any, not none),
  or ``{"eq" | "ne": value}``, ``{"in": [values]}`` (several operators in one object: all hold);
* ``created_at``, ``updated_at``: a value (that day, or that instant) or ``{"gt" | "gte" | "lt" |
  "lte" | "ne": value}``, ``{"in": [values]}``; values are ISO dates or datetimes, or Unix
  seconds; a bare date compared with ``lte`` / ``gt`` means the whole day;
* ``metadata``: ``{key: value}`` (equal, top-level keys) or ``{key: {"eq" | "ne" | "contains" |
  "in": ...}}``;
* ``categories``: ``{"in": [names]}`` or ``{"contains": name}``; ``memory_ids``: a list or
  ``{"in": [ids]}``; ``keywords``: ``{"contains" | "icontains": text}``.

Anything else is a 400 naming what is wrong (Mem0's SDK raises it as ``ValidationError``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, not_, or_
from sqlalchemy.orm import InstrumentedAttribute

from backend.db.models import EndUser, Fact
from backend.errors import BadRequestError
from backend.repositories.scoped import SCOPE_OWNER

ENTITY_FIELDS = ("user_id", "agent_id", "app_id", "run_id")
LOGICAL = ("AND", "OR", "NOT")
FIELDS = (*ENTITY_FIELDS, "created_at", "updated_at", "metadata", "categories", "memory_ids",
          "keywords")  # fmt: skip

Condition = ColumnElement[bool]


class FilterError(BadRequestError):
    code = "invalid_filter"


def compile_filter(filters: dict[str, Any]) -> Condition:
    """The condition for ``filters`` (facts joined with their end user)."""
    if not isinstance(filters, dict) or not filters:
        raise FilterError("filters must be a non-empty object")
    return _node(filters)


def mentions_entity(filters: Any) -> bool:
    """Whether an entity id field appears anywhere in the filter (Mem0 requires one)."""
    if isinstance(filters, dict):
        return any(k in ENTITY_FIELDS or mentions_entity(v) for k, v in filters.items()
                   if k in ENTITY_FIELDS or k in LOGICAL)  # fmt: skip
    if isinstance(filters, list):
        return any(mentions_entity(item) for item in filters)
    return False


def _node(node: Any) -> Condition:
    if not isinstance(node, dict) or not node:
        raise FilterError(f"a filter must be a non-empty object, not {node!r}"[:300])
    parts = [_key(key, value) for key, value in node.items()]
    return parts[0] if len(parts) == 1 else and_(*parts)


def _many(key: str, value: Any) -> list[Condition]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise FilterError(f"{key} needs at least one filter")
    return [_node(item) for item in items]


def _key(key: str, value: Any) -> Condition:
    if key == "AND":
        return and_(*_many(key, value))
    if key == "OR":
        return or_(*_many(key, value))
    if key == "NOT":
        return not_(and_(*_many(key, value)))
    if key in (*ENTITY_FIELDS, "created_at", "updated_at") and _several(value):
        return and_(*[_key(key, {op: operand}) for op, operand in value.items()])
    if key in ENTITY_FIELDS:
        return _entity(key, value)
    if key in ("created_at", "updated_at"):
        return _time(key, getattr(Fact, key), value)
    handler = _CONTENT.get(key)
    if handler is None:
        raise FilterError(
            f"unknown filter key {key!r}: a key must be one of {', '.join(LOGICAL + FIELDS)}"
        )
    return handler(value)


def _several(value: Any) -> bool:
    """``{"gte": a, "lte": b}``: several operators on one field, all of which must hold."""
    return isinstance(value, dict) and len(value) > 1


def _operator(key: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, Any]:
    """(operator, operand) of ``value``: a bare value is ``eq``."""
    if not isinstance(value, dict):
        return "eq", value
    if len(value) != 1:
        raise FilterError(f"{key}: give one operator per condition, e.g. {{'in': [...]}}")
    op, operand = next(iter(value.items()))
    if op not in allowed:
        raise FilterError(f"{key}: operator {op!r} is not one of {', '.join(allowed)}")
    return op, operand


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise FilterError(f"{key}: expected a string of 1 to 200 characters")
    if any(ord(c) < 32 for c in value):
        raise FilterError(f"{key}: control characters are not allowed")
    return value


def _texts(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > 1000:
        raise FilterError(f"{key}: 'in' takes a list of 1 to 1000 values")
    return [_text(key, v) for v in value]


def _entity(key: str, value: Any) -> Condition:
    column = EndUser.external_id if key == "user_id" else getattr(Fact, key)
    op, operand = _operator(key, value, ("eq", "ne", "in"))
    if op == "in":
        return column.in_(_texts(key, operand))
    wanted = _text(key, operand)
    if wanted == "*":  # any value, never none
        present = column != SCOPE_OWNER if key == "user_id" else column.is_not(None)
        return present if op == "eq" else not_(present)
    return column == wanted if op == "eq" else column.is_distinct_from(wanted)


def _instant(key: str, value: Any) -> tuple[datetime, bool]:
    """(the instant, whether it was a bare date: midnight UTC of that day)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise FilterError(f"{key}: expected an ISO date or datetime, or Unix seconds")
    try:
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC), False
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=UTC), True
        moment = datetime.fromisoformat(value)
    except (ValueError, OverflowError, OSError):
        message = f"{key}: {str(value)[:40]!r} is not a date, datetime or timestamp"
        raise FilterError(message) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)), False


def _time(key: str, column: InstrumentedAttribute[datetime], value: Any) -> Condition:
    op, operand = _operator(key, value, ("gt", "gte", "lt", "lte", "ne", "in"))
    if op == "in":
        if not isinstance(operand, list) or not operand or len(operand) > 100:
            raise FilterError(f"{key}: 'in' takes a list of 1 to 100 values")
        return or_(*[_time(key, column, v) for v in operand])
    moment, whole_day = _instant(key, operand)
    end = moment + timedelta(days=1) if whole_day else moment
    if op == "eq":
        return and_(column >= moment, column < end) if whole_day else column == moment
    if op == "ne":
        return not_(_time(key, column, operand))
    if op == "gt":
        return column >= end if whole_day else column > moment
    if op == "lte":
        return column < end if whole_day else column <= moment
    return column >= moment if op == "gte" else column < moment


def _metadata(value: Any) -> Condition:
    if not isinstance(value, dict) or not value:
        raise FilterError("metadata: expected an object of top-level keys, e.g. {'topic': 'x'}")
    parts = []
    for name, condition in value.items():
        op, operand = _operator(f"metadata.{name}", condition, ("eq", "ne", "contains", "in"))
        if op == "in":
            if not isinstance(operand, list) or not operand or len(operand) > 100:
                raise FilterError(f"metadata.{name}: 'in' takes a list of 1 to 100 values")
            parts.append(or_(*[Fact.meta.contains({name: v}) for v in operand]))
        elif op == "contains":
            parts.append(Fact.meta[name].astext.contains(_text(name, operand), autoescape=True))
        else:
            equal = Fact.meta.contains({name: operand})
            parts.append(equal if op == "eq" else not_(equal))
    return and_(*parts)


def _categories(value: Any) -> Condition:
    op, operand = _operator("categories", value, ("in", "contains"))
    if op == "eq":
        raise FilterError("categories: use {'in': [...]} or {'contains': name}")
    names = _texts("categories", operand) if op == "in" else [_text("categories", operand)]
    return or_(*[Fact.categories.contains([name]) for name in names])


def _memory_ids(value: Any) -> Condition:
    _, operand = _operator("memory_ids", value, ("in",))
    ids = []
    for item in _texts("memory_ids", operand):
        try:
            ids.append(uuid.UUID(item))
        except ValueError:
            raise FilterError(f"memory_ids: {item[:40]!r} is not a memory id") from None
    return Fact.public_id.in_(ids)


def _keywords(value: Any) -> Condition:
    op, operand = _operator("keywords", value, ("contains", "icontains"))
    if op == "eq":
        raise FilterError("keywords: use {'contains': text} or {'icontains': text}")
    text = _text("keywords", operand)
    if op == "contains":
        return Fact.text.contains(text, autoescape=True)
    return Fact.text.icontains(text, autoescape=True)


_CONTENT: dict[str, Callable[[Any], Condition]] = {
    "metadata": _metadata,
    "categories": _categories,
    "memory_ids": _memory_ids,
    "keywords": _keywords,
}

__all__ = ["FilterError", "compile_filter", "mentions_entity"]
