"""Mongo-style metadata filters: one parser shared by every backend, which renders the result.

A filter dict is parsed once into a small tree (`AllOf`, `AnyOf`, `Condition`), checking every
part and naming where a problem is; `filter_sql` (the embedded store) and `qdrant_filters` (Qdrant)
only render that tree, so both backends accept the same filters and select the same pages.

Semantics (the reference the tests compare both backends with): fields are the built-ins
`doc_id`, `page_no`, `page_id` or a top-level key of the page metadata. Comparisons are
type-strict like MongoDB: numbers (int or float) compare with numbers, strings with strings, bools
only equal bools; a range on numbers never matches a string value. ``None`` equals a missing or
null field; `$ne`/`$nin` match pages without the field; `$exists` is true when the key is present
(even with a null value). Metadata values that are lists or objects never equal a scalar.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrag_compress.store.base import StoreError

BUILTIN_COLUMNS = {"doc_id": "doc_id", "page_no": "page_no", "page_id": "page_id"}
RANGES = ("$gt", "$gte", "$lt", "$lte")
OPERATORS = ("$eq", "$ne", *RANGES, "$in", "$nin", "$exists")
MAX_DEPTH = 32  # nested $and/$or levels; deeper filters are refused, not recursed into
INT64 = (-(2**63), 2**63 - 1)
Scalar = str | int | float | bool | None

_show = reprlib.Repr()
_show.maxlevel, _show.maxstring, _show.maxother, _show.maxlist, _show.maxdict = 3, 60, 60, 6, 4


class FilterError(StoreError, ValueError):
    """A filter that cannot be understood; the message names the offending part."""


@dataclass(frozen=True)
class Condition:
    """One test on one field: ``op`` is an operator of `OPERATORS`; ``value`` is a scalar,
    a tuple of scalars (`$in`/`$nin`) or a bool (`$exists`)."""

    field: str
    op: str
    value: Any

    @property
    def builtin(self) -> bool:
        return self.field in BUILTIN_COLUMNS


@dataclass(frozen=True)
class AllOf:
    """Every part matches (an empty `AllOf` matches every page)."""

    parts: tuple[Node, ...]


@dataclass(frozen=True)
class AnyOf:
    """At least one part matches."""

    parts: tuple[Node, ...]


Node = Condition | AllOf | AnyOf


def parse_filter(spec: Any) -> Node | None:
    """The checked tree of a filter dict; None (no filter) for None or ``{}``."""
    if spec is None:
        return None
    node = _parse_dict(spec, "filter", 0)
    return None if node == AllOf(()) else node


def compile_filter(spec: dict[str, Any]) -> tuple[str, list[Any]]:
    """``(sql, params)`` of a filter over the pages table; an empty dict matches everything."""
    from vrag_compress.store.filter_sql import to_sql

    return to_sql(parse_filter(spec))


def show(value: Any) -> str:
    """A short repr for error messages (safe on huge or deeply nested values)."""
    return _show.repr(value)


def _parse_dict(spec: Any, where: str, depth: int) -> AllOf:
    if not isinstance(spec, dict):
        raise FilterError(f"{where} must be a dict, got {type(spec).__name__}: {show(spec)}")
    if depth > MAX_DEPTH:
        raise FilterError(f"filter nests $and/$or more than {MAX_DEPTH} levels deep; flatten it")
    return AllOf(tuple(_parse_item(key, value, where, depth) for key, value in spec.items()))


def _parse_item(key: Any, value: Any, where: str, depth: int) -> Node:
    if not isinstance(key, str):
        raise FilterError(
            f"{where}: field names must be strings, got {show(key)} ({type(key).__name__})"
        )
    here = f"{where}.{key}" if where != "filter" else key
    if key in ("$and", "$or"):
        if not isinstance(value, (list, tuple)) or not value:
            raise FilterError(f"{here} needs a non-empty list of filters, got {show(value)}")
        parts = tuple(_parse_dict(sub, f"{here}[{i}]", depth + 1) for i, sub in enumerate(value))
        return AllOf(parts) if key == "$and" else AnyOf(parts)
    if key.startswith("$"):
        raise FilterError(f"unknown logical operator {key!r} in {where}; use $and or $or")
    if not key or "\x00" in key or not _encodable(key):
        raise FilterError(
            f"{where}: field names must be non-empty valid Unicode without NUL: {show(key)}"
        )
    if isinstance(value, dict):
        if not value:
            raise FilterError(f"empty operator dict for field {key!r}")
        return AllOf(tuple(_parse_op(key, op, arg, here) for op, arg in value.items()))
    return _parse_op(key, "$eq", value, here)


def _parse_op(field: str, op: Any, arg: Any, where: str) -> Condition:
    if op in ("$eq", "$ne"):
        return Condition(field, op, _scalar(arg, f"{where} {op}"))
    if op in RANGES:
        value = _scalar(arg, f"{where} {op}")
        if value is None or isinstance(value, bool):
            raise FilterError(f"filter {field!r} {op}: range operands must be numbers or strings")
        return Condition(field, op, value)
    if op in ("$in", "$nin"):
        if isinstance(arg, np.ndarray):
            arg = arg.tolist()
        if not isinstance(arg, (list, tuple)):
            raise FilterError(f"filter {field!r} {op} needs a list, got {show(arg)}")
        return Condition(
            field, op, tuple(_scalar(v, f"{where} {op}[{i}]") for i, v in enumerate(arg))
        )
    if op == "$exists":
        if not isinstance(arg, (bool, np.bool_)):
            raise FilterError(f"filter {field!r} $exists needs true or false, got {show(arg)}")
        return Condition(field, op, bool(arg))
    raise FilterError(
        f"unknown filter operator {show(op)} on field {field!r}; known: {sorted(OPERATORS)}"
    )


def _scalar(value: Any, where: str) -> Scalar:
    """A plain Python scalar (numpy scalars unwrapped); anything else is a `FilterError`."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if "\x00" in value or not _encodable(value):
            raise FilterError(
                f"{where}: strings in filters must be valid Unicode without NUL: {show(value)}"
            )
        return str(value)
    if isinstance(value, numbers.Integral):
        value = int(value)
        if not INT64[0] <= value <= INT64[1]:
            raise FilterError(f"{where}: integers must fit in 64 bits, got {show(value)}")
        return value
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise FilterError(f"{where}: numbers must be finite, got {value}")
        return value
    raise FilterError(
        f"{where}: values must be str, int, float, bool or None, got {show(value)} "
        f"({type(value).__name__})"
    )


def _encodable(text: str) -> bool:
    """False for strings holding lone surrogates (not storable as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
