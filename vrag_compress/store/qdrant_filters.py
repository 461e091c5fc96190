"""Mongo-style metadata filters (the `LocalStore` dialect) translated to Qdrant `Filter`s.

The same filter dict must select the same pages on either backend, so the rules mirror
`store/filters.py`: built-in fields `doc_id`, `page_no`, `page_id` are top-level payload keys,
anything else is a key of the page's ``metadata`` payload object; comparisons are type-strict
(numbers match int or float, a string never matches a number). Qdrant has no lexical range on
strings, so a range with a string operand is refused with a `FilterError` instead of silently
matching nothing.
"""

from __future__ import annotations

from typing import Any

from qdrant_client import models

from vrag_compress.store.filters import BUILTIN_COLUMNS, FilterError

_RANGE = {"$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
_OPERATORS = sorted([*_RANGE, "$eq", "$ne", "$in", "$nin", "$exists"])
_BAD_KEY_CHARS = set('.[]"')

Condition = Any  # a qdrant `Condition` (FieldCondition, IsEmptyCondition, Filter, ...)

# `page_id` is on every page, so "page_id is empty" never matches: our "match nothing"
NOTHING = models.IsEmptyCondition(is_empty=models.PayloadField(key="page_id"))
EVERYTHING = models.Filter(must_not=[NOTHING])


def to_qdrant_filter(spec: dict[str, Any] | None) -> models.Filter | None:
    """A Qdrant filter for a filter dict; None (or {}) matches everything."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise FilterError(f"filter must be a dict, got {type(spec).__name__}")
    if not spec:
        return None
    return _compile(spec)


def _compile(spec: dict[str, Any]) -> models.Filter:
    if not isinstance(spec, dict):
        raise FilterError(f"filter must be a dict, got {type(spec).__name__}")
    return models.Filter(must=[_compile_item(k, v) for k, v in spec.items()])


def _compile_item(key: str, value: Any) -> Condition:
    if key in ("$and", "$or"):
        if not isinstance(value, list) or not value:
            raise FilterError(f"{key} needs a non-empty list of filters, got {value!r}")
        subs = [_compile(sub) for sub in value]
        return models.Filter(must=subs) if key == "$and" else models.Filter(should=subs)
    if not isinstance(key, str) or not key:
        raise FilterError(f"filter field names must be non-empty strings, got {key!r}")
    if key.startswith("$"):
        raise FilterError(f"unknown logical operator {key!r}; use $and or $or")
    path = _path(key)
    if isinstance(value, dict):
        if not value:
            raise FilterError(f"empty operator dict for field {key!r}")
        return models.Filter(must=[_compile_op(key, path, op, arg) for op, arg in value.items()])
    return _compile_op(key, path, "$eq", value)


def _path(key: str) -> str:
    if key in BUILTIN_COLUMNS:
        return key
    if _BAD_KEY_CHARS & set(key):
        raise FilterError(
            f"filter field {key!r}: the Qdrant backend cannot filter on metadata keys containing "
            "'.', '[', ']' or '\"'; rename the key"
        )
    return f"metadata.{key}"


def _check_scalar(key: str, op: str, value: Any) -> Any:
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise FilterError(
            f"filter {key!r} {op}: values must be str, int, float, bool or None, got {value!r}"
        )
    return value


def _equals(key: str, path: str, op: str, value: Any) -> Condition:
    """Type-strict equality; None means missing or null."""
    _check_scalar(key, op, value)
    if value is None:
        return models.IsEmptyCondition(is_empty=models.PayloadField(key=path))
    if isinstance(value, (bool, str)):
        return models.FieldCondition(key=path, match=models.MatchValue(value=value))
    # numbers: a closed range matches int and float payloads alike (2019 == 2019.0)
    return models.FieldCondition(key=path, range=models.Range(gte=value, lte=value))


def _compile_op(key: str, path: str, op: str, arg: Any) -> Condition:
    if op == "$eq":
        return _equals(key, path, op, arg)
    if op == "$ne":
        return models.Filter(must_not=[_equals(key, path, op, arg)])
    if op in _RANGE:
        if arg is None or isinstance(arg, bool) or not isinstance(arg, (int, float, str)):
            raise FilterError(f"filter {key!r} {op}: range operands must be numbers or strings")
        if isinstance(arg, str):
            raise FilterError(
                f"filter {key!r} {op} {arg!r}: the Qdrant backend supports ranges on numbers "
                "only (no string ranges); store the field as a number or use $in"
            )
        return models.FieldCondition(key=path, range=models.Range(**{_RANGE[op]: arg}))
    if op in ("$in", "$nin"):
        if not isinstance(arg, (list, tuple)):
            raise FilterError(f"filter {key!r} {op} needs a list, got {arg!r}")
        any_of = models.Filter(should=[_equals(key, path, op, v) for v in arg]) if arg else NOTHING
        return any_of if op == "$in" else models.Filter(must_not=[any_of])
    if op == "$exists":
        if not isinstance(arg, bool):
            raise FilterError(f"filter {key!r} $exists needs true or false, got {arg!r}")
        if key in BUILTIN_COLUMNS:
            return EVERYTHING if arg else NOTHING
        empty = models.IsEmptyCondition(is_empty=models.PayloadField(key=path))
        return models.Filter(must_not=[empty]) if arg else empty
    raise FilterError(f"unknown filter operator {op!r} on field {key!r}; known: {_OPERATORS}")
