"""Render a parsed filter (`filters.parse_filter`) as a SQLite WHERE clause over the pages table.

A metadata key of printable ASCII without quote or backslash is read through a JSON path (fast);
any other key (non-ASCII, quotes, backslashes, control characters) through ``json_each`` over the
page's metadata, matching the decoded key: a JSON path would have to spell such a key as the
escaped text stored in the JSON, which SQLite versions do not treat alike. `$in` lists are bound
as one JSON array (``IN (SELECT value FROM json_each(?))``) and long `$and`/`$or` lists are joined
as a balanced tree, so neither runs into SQLite's expression depth limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vrag_compress.store.filters import (
    BUILTIN_COLUMNS,
    AllOf,
    AnyOf,
    Condition,
    Node,
    parse_filter,
)

Sql = tuple[str, list[Any]]
_COMPARE = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_TEXT_COLUMNS = {"doc_id", "page_id"}  # page_no is the one integer column
_TRUE: Sql = ("1", [])
_FALSE: Sql = ("0", [])


def compile_filter(spec: dict[str, Any]) -> Sql:
    """``(sql, params)`` of a filter over the pages table; an empty dict matches everything."""
    return to_sql(parse_filter(spec))


def to_sql(node: Node | None) -> Sql:
    """``(sql, params)`` selecting the pages the filter matches (everything for None)."""
    if node is None:
        return _TRUE
    if isinstance(node, AllOf):
        return _join([to_sql(p) for p in node.parts], "AND") if node.parts else _TRUE
    if isinstance(node, AnyOf):
        return _join([to_sql(p) for p in node.parts], "OR")
    return _builtin(node) if node.builtin else _metadata(node)


def _join(parts: list[Sql], op: str) -> Sql:
    """``a op b op ...`` as a balanced tree (depth log2(n), not n)."""
    if len(parts) == 1:
        return parts[0]
    mid = len(parts) // 2
    (left, lp), (right, rp) = _join(parts[:mid], op), _join(parts[mid:], op)
    return f"({left} {op} {right})", lp + rp


def _negate(sql: Sql) -> Sql:
    return f"NOT coalesce(({sql[0]}), 0)", sql[1]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return "text" if isinstance(value, str) else "number"


# ----------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class _Member:
    """How SQL reaches one metadata key: its JSON type and value expressions (``t``, ``v``).

    A plain key (printable ASCII without quote or backslash, stored unescaped) is read with a JSON
    path, the fast way; any other key through ``json_each``, which compares decoded keys."""

    key: str

    @property
    def plain(self) -> bool:
        return json.dumps(self.key) == f'"{self.key}"' and self.key.isprintable()

    def test(self, predicate: str, params: list[Any]) -> Sql:
        """Whether the key is present with a value satisfying ``predicate`` (over {t}, {v})."""
        if self.plain:
            path = "'$.\"" + self.key.replace("'", "''") + "\"'"
            t, v = f"json_type(pages.metadata, {path})", f"json_extract(pages.metadata, {path})"
            return f"coalesce(({predicate.format(t=t, v=v)}), 0)", params
        where = predicate.format(t="m.type", v="m.value")
        sql = f"EXISTS (SELECT 1 FROM json_each(pages.metadata) AS m WHERE m.key = ? AND {where})"
        return sql, [self.key, *params]


def _type_guard(kind: str) -> str:
    return {"text": "{t} = 'text'", "number": "{t} IN ('integer', 'real')"}[kind]


def _value_test(value: Any, op: str) -> tuple[str, list[Any]]:
    """A predicate: the value has the operand's JSON type and compares true."""
    if isinstance(value, bool):
        return "{t} = '" + ("true" if value else "false") + "'", []
    return f"{_type_guard(_kind(value))} AND {{v}} {_COMPARE[op]} ?", [value]


def _metadata(cond: Condition) -> Sql:
    member, op, value = _Member(cond.field), cond.op, cond.value
    if op == "$exists":
        present = member.test("{t} IS NOT NULL", [])
        return present if value else _negate(present)
    if op in ("$eq", "$ne"):
        match = (
            _missing_or_null(member) if value is None else member.test(*_value_test(value, "$eq"))
        )
        return match if op == "$eq" else _negate(match)
    if op in ("$in", "$nin"):
        match = _metadata_in(member, value)
        return match if op == "$in" else _negate(match)
    return member.test(*_value_test(value, op))  # a range


def _missing_or_null(member: _Member) -> Sql:
    return _negate(member.test("{t} != 'null'", []))


def _metadata_in(member: _Member, values: tuple[Any, ...]) -> Sql:
    tests: list[str] = []
    params: list[Any] = []
    for kind in ("text", "number"):
        same = [v for v in values if v is not None and _kind(v) == kind]
        if same:
            tests.append(f"({_type_guard(kind)} AND {{v}} IN (SELECT value FROM json_each(?)))")
            params.append(json.dumps(same))
    bools = sorted({str(v).lower() for v in values if isinstance(v, bool)})
    if bools:
        tests.append("{t} IN (" + ", ".join(f"'{b}'" for b in bools) + ")")
    parts = [member.test("(" + " OR ".join(tests) + ")", params)] if tests else []
    if any(v is None for v in values):
        parts.append(_missing_or_null(member))
    return _join(parts, "OR") if parts else _FALSE


# ----------------------------------------------------------------------------- built-in columns


def _builtin(cond: Condition) -> Sql:
    """doc_id/page_id (text) and page_no (integer): always present, never null."""
    column, op, value = BUILTIN_COLUMNS[cond.field], cond.op, cond.value
    if op == "$exists":
        return _TRUE if value else _FALSE
    if op in ("$in", "$nin"):
        same = [v for v in value if _fits(column, v)]
        match = (f"{column} IN (SELECT value FROM json_each(?))", [json.dumps(same)])
        match = match if same else _FALSE
        return match if op == "$in" else _negate(match)
    match = (f"{column} {_COMPARE.get(op, '=')} ?", [value]) if _fits(column, value) else _FALSE
    return _negate(match) if op == "$ne" else match


def _fits(column: str, value: Any) -> bool:
    """Whether a value can equal/compare with the column's values at all (type-strict)."""
    if value is None or isinstance(value, bool):
        return False
    return isinstance(value, str) == (column in _TEXT_COLUMNS)
