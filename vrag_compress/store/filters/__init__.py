"""Mongo-style metadata filters: one parser shared by every backend, which renders the result.

A filter dict is parsed once into a small tree (`AllOf`, `AnyOf`, `Condition`), checking every
part and naming where a problem is; `filters.sql` (the embedded store) and `filters.qdrant` (Qdrant)
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrag_compress.store.user_input import (
    UserInputError,
    check_text,
    load_json,
    parse_pairs,
    show,
)

BUILTIN_COLUMNS = {"doc_id": "doc_id", "page_no": "page_no", "page_id": "page_id"}
RANGES = ("$gt", "$gte", "$lt", "$lte")
OPERATORS = ("$eq", "$ne", *RANGES, "$in", "$nin", "$exists")
MAX_DEPTH = 32  # nested $and/$or levels; deeper filters are refused, not recursed into
MAX_CONDITIONS = 2048  # field tests in one filter: SQLite plans long AND/OR lists super-linearly
MAX_IN_VALUES = 100_000  # items of one $in/$nin list
INT64 = (-(2**63), 2**63 - 1)
Scalar = str | int | float | bool | None


class FilterError(UserInputError):
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
    conditions = _count_conditions(node)
    if conditions > MAX_CONDITIONS:
        raise FilterError(
            f"filter has {conditions:,} conditions, over the limit of {MAX_CONDITIONS:,}; "
            "match many values of one field with $in"
        )
    return None if node == AllOf(()) else node


def parse_user_filter(
    given: str | Sequence[str] | Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """A filter as a front end receives it: one JSON object, repeated ``KEY=VALUE`` (equality;
    VALUE is read as JSON when it is JSON, else as text) or an already decoded object (a JSON
    request body). The CLI and the server both call this, so they refuse the same filters with
    the same `FilterError`; beyond `parse_filter` it refuses nesting too deep to decode, strings
    over `MAX_STRING_CHARS` and bidi control characters (see `user_input`). None when no filter.
    """
    spec: Any
    if given is None:
        return None
    if isinstance(given, Mapping):
        spec = dict(given)
    else:
        texts = [given] if isinstance(given, str) else list(given)
        if not texts:
            return None
        if len(texts) == 1 and texts[0].lstrip().startswith("{"):
            spec = load_json(texts[0], "filter", FilterError)  # "{...": an object or an error
        else:
            spec = parse_pairs(texts, "filter", FilterError)
    check_text(spec, "filter", FilterError)
    parse_filter(spec)
    return spec


def check_user_metadata(metadata: Any, what: str = "metadata") -> dict[str, Any]:
    """Metadata a user attaches to pages (``-m``, an upload's ``metadata``, `VisualIndex.add`),
    refused before any work when a filter could not select it: keys must be non-empty strings
    that are not a built-in field (`doc_id`, `page_no`, `page_id`) and do not start with ``$``
    (an operator to a filter); values JSON-like with finite numbers (see also `check_text`).
    Raises `UserInputError`."""
    if not isinstance(metadata, Mapping):
        raise UserInputError(f"{what} must be an object of KEY: VALUE, got {show(metadata)}")
    for key in metadata:
        if not isinstance(key, str) or not key:
            raise UserInputError(f"{what}: keys must be non-empty strings, got {show(key)}")
        if key.startswith("$"):
            raise UserInputError(
                f"{what}: key {show(key)} starts with '$', which filters read as an operator; "
                "rename it"
            )
        if key in BUILTIN_COLUMNS:
            raise UserInputError(
                f"{what}: key {key!r} is a built-in field (filters on it read the page's own "
                f"{key}); rename it"
            )
    check_text(metadata, what)
    for value in _leaves(metadata):
        if not (value is None or isinstance(value, (str, bool, numbers.Real))):
            raise UserInputError(
                f"{what}: values must be JSON (text, numbers, true/false, null, lists, objects), "
                f"got {show(value)} ({type(value).__name__})"
            )
    return dict(metadata)


def _leaves(value: Any) -> list[Any]:
    """The scalars of a JSON-like value (depth already bounded by `check_text`), no recursion."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            found.append(item)
    return found


def _count_conditions(node: Node) -> int:
    if isinstance(node, Condition):
        return 1
    return sum(_count_conditions(part) for part in node.parts)


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
        if len(arg) > MAX_IN_VALUES:
            raise FilterError(
                f"filter {field!r} {op} has {len(arg):,} values, over the limit of "
                f"{MAX_IN_VALUES:,}"
            )
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
