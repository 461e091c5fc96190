"""Render a parsed filter (`filters.parse_filter`) as a Qdrant `Filter`.

Built-in fields `doc_id`, `page_no`, `page_id` are top-level payload keys; anything else is a key
of the page's ``metadata`` payload object, addressed as ``metadata."key"`` (quoted, so dots,
brackets, non-ASCII letters and control characters in keys are taken literally). Qdrant's key
syntax has no escape for a double quote, and Qdrant has no lexical range on strings: both are
refused with a `FilterError` instead of silently matching nothing.
"""

from __future__ import annotations

from typing import Any

from qdrant_client import models

from vrag_compress.store.filters import (
    AllOf,
    AnyOf,
    Condition,
    FilterError,
    Node,
    parse_filter,
)

_RANGE = {"$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}

Clause = Any  # a qdrant `Condition` (FieldCondition, IsEmptyCondition, Filter, ...)

# `page_id` is on every page, so "page_id is empty" never matches: our "match nothing"
NOTHING = models.IsEmptyCondition(is_empty=models.PayloadField(key="page_id"))
EVERYTHING = models.Filter(must_not=[NOTHING])


def to_qdrant_filter(spec: dict[str, Any] | None) -> models.Filter | None:
    """A Qdrant filter for a filter dict; None (or {}) matches everything."""
    node = parse_filter(spec)
    return None if node is None else models.Filter(must=[render(node)])


def render(node: Node) -> Clause:
    """The Qdrant condition of a parsed filter tree."""
    if isinstance(node, AllOf):
        return models.Filter(must=[render(p) for p in node.parts]) if node.parts else EVERYTHING
    if isinstance(node, AnyOf):
        return models.Filter(should=[render(p) for p in node.parts])
    return _condition(node)


def _path(cond: Condition) -> str:
    if cond.builtin:
        return cond.field
    if '"' in cond.field:
        raise FilterError(
            f"filter field {cond.field!r}: the Qdrant backend cannot filter on metadata keys "
            'containing a double quote (")'
        )
    return f'metadata."{cond.field}"'


def _equals(path: str, value: Any) -> Clause:
    """Type-strict equality; None means missing or null."""
    if value is None:
        return models.IsEmptyCondition(is_empty=models.PayloadField(key=path))
    if isinstance(value, (bool, str)):
        return models.FieldCondition(key=path, match=models.MatchValue(value=value))
    # numbers: a closed range matches int and float payloads alike (2019 == 2019.0)
    return models.FieldCondition(key=path, range=models.Range(gte=value, lte=value))


def _any_of(path: str, values: tuple[Any, ...]) -> Clause:
    strings = [v for v in values if isinstance(v, str)]
    clauses = [_equals(path, v) for v in values if not isinstance(v, str)]
    if strings:
        clauses.append(models.FieldCondition(key=path, match=models.MatchAny(any=strings)))
    return models.Filter(should=clauses) if clauses else NOTHING


def _condition(cond: Condition) -> Clause:
    path, op, value = _path(cond), cond.op, cond.value
    if op == "$eq":
        return _equals(path, value)
    if op == "$ne":
        return models.Filter(must_not=[_equals(path, value)])
    if op in _RANGE:
        if isinstance(value, str):
            raise FilterError(
                f"filter {cond.field!r} {op} {value!r}: the Qdrant backend supports ranges on "
                "numbers only (no string ranges); store the field as a number or use $in"
            )
        return models.FieldCondition(key=path, range=models.Range(**{_RANGE[op]: value}))
    if op in ("$in", "$nin"):
        any_of = _any_of(path, value)
        return any_of if op == "$in" else models.Filter(must_not=[any_of])
    # $exists: the key is present, even with a null value
    if cond.builtin:
        return EVERYTHING if value else NOTHING
    empty = models.IsEmptyCondition(is_empty=models.PayloadField(key=path))
    null = models.IsNullCondition(is_null=models.PayloadField(key=path))
    if value:
        return models.Filter(should=[models.Filter(must_not=[empty]), null])
    return models.Filter(must=[empty], must_not=[null])
