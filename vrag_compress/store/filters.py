"""Mongo-style metadata filters compiled to a SQLite WHERE clause over the pages table.

Filtering in SQL (``json_extract`` over the JSON metadata column) keeps the rules in one place and
lets the catalog's own indexes serve the built-in fields. Comparisons are type-strict like MongoDB:
a range on numbers never matches a string value.
"""

from __future__ import annotations

from typing import Any

from vrag_compress.store.base import StoreError

BUILTIN_COLUMNS = {"doc_id": "doc_id", "page_no": "page_no", "page_id": "page_id"}
_COMPARE = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_OPERATORS = sorted([*_COMPARE, "$ne", "$in", "$nin", "$exists"])
Scalar = str | int | float | bool | None


class FilterError(StoreError, ValueError):
    """A filter that cannot be understood; the message names the offending part."""


def compile_filter(spec: dict[str, Any]) -> tuple[str, list[Any]]:
    """``(sql, params)`` for a filter dict; an empty dict matches everything."""
    if not isinstance(spec, dict):
        raise FilterError(f"filter must be a dict, got {type(spec).__name__}")
    parts: list[str] = []
    params: list[Any] = []
    for key, value in spec.items():
        sql, p = _compile_item(key, value)
        parts.append(sql)
        params.extend(p)
    return (" AND ".join(f"({p})" for p in parts) or "1", params)


def _compile_item(key: str, value: Any) -> tuple[str, list[Any]]:
    if key in ("$and", "$or"):
        if not isinstance(value, list) or not value:
            raise FilterError(f"{key} needs a non-empty list of filters, got {value!r}")
        compiled = [compile_filter(sub) for sub in value]
        joiner = " AND " if key == "$and" else " OR "
        sql = joiner.join(f"({s})" for s, _ in compiled)
        return sql, [p for _, ps in compiled for p in ps]
    if key.startswith("$"):
        raise FilterError(f"unknown logical operator {key!r}; use $and or $or")
    if not isinstance(key, str) or not key:
        raise FilterError(f"filter field names must be non-empty strings, got {key!r}")
    field = _field_sql(key)
    if isinstance(value, dict):
        if not value:
            raise FilterError(f"empty operator dict for field {key!r}")
        compiled = [_compile_op(key, field, op, arg) for op, arg in value.items()]
        return " AND ".join(f"({s})" for s, _ in compiled), [p for _, ps in compiled for p in ps]
    return _compile_op(key, field, "$eq", value)


def _field_sql(key: str) -> str:
    """Built-in columns by name; anything else is a top-level key of the JSON metadata."""
    if key in BUILTIN_COLUMNS:
        return BUILTIN_COLUMNS[key]
    escaped = key.replace('"', '""').replace("'", "''")
    return f"json_extract(metadata, '$.\"{escaped}\"')"


def _type_sql(key: str, value: Any) -> str:
    """A guard that the stored value has the operand's JSON type (numbers match int or real)."""
    if key in BUILTIN_COLUMNS:
        return "1"
    escaped = key.replace('"', '""').replace("'", "''")
    jtype = f"json_type(metadata, '$.\"{escaped}\"')"
    if isinstance(value, bool):
        return f"{jtype} IN ('true', 'false')"
    if isinstance(value, (int, float)):
        return f"{jtype} IN ('integer', 'real')"
    return f"{jtype} = 'text'"


def _check_scalar(key: str, op: str, value: Any) -> Any:
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise FilterError(
            f"filter {key!r} {op}: values must be str, int, float, bool or None, got {value!r}"
        )
    return int(value) if isinstance(value, bool) else value


def _compile_op(key: str, field: str, op: str, arg: Any) -> tuple[str, list[Any]]:
    if op in ("$eq", "$ne"):
        _check_scalar(key, op, arg)
        if arg is None:
            return f"{field} IS {'NOT ' if op == '$ne' else ''}NULL", []
        match = f"({_type_sql(key, arg)} AND {field} = ?)"
        sql = match if op == "$eq" else f"NOT coalesce({match}, 0)"
        return sql, [_check_scalar(key, op, arg)]
    if op in _COMPARE:
        if arg is None or isinstance(arg, bool):
            raise FilterError(f"filter {key!r} {op}: range operands must be numbers or strings")
        _check_scalar(key, op, arg)
        return f"({_type_sql(key, arg)} AND {field} {_COMPARE[op]} ?)", [arg]
    if op in ("$in", "$nin"):
        if not isinstance(arg, (list, tuple)):
            raise FilterError(f"filter {key!r} {op} needs a list, got {arg!r}")
        items = [
            f"({_type_sql(key, v)} AND {field} = ?)" if v is not None else f"{field} IS NULL"
            for v in arg
        ]
        params = [_check_scalar(key, op, v) for v in arg if v is not None]
        any_match = " OR ".join(items) or "0"
        sql = f"({any_match})" if op == "$in" else f"NOT coalesce(({any_match}), 0)"
        return sql, params
    if op == "$exists":
        if not isinstance(arg, bool):
            raise FilterError(f"filter {key!r} $exists needs true or false, got {arg!r}")
        if key in BUILTIN_COLUMNS:
            return ("1" if arg else "0"), []
        escaped = key.replace('"', '""').replace("'", "''")
        jtype = f"json_type(metadata, '$.\"{escaped}\"')"
        return f"{jtype} IS {'NOT ' if arg else ''}NULL", []
    raise FilterError(f"unknown filter operator {op!r} on field {key!r}; known: {_OPERATORS}")
