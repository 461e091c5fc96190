"""LlamaIndex `MetadataFilters` translated to the store's Mongo-style filter dicts.

The store compiles filters to SQL itself, so translation is purely structural: one LlamaIndex
operator becomes one store operator, nested filter groups become `$and` / `$or`. Operators the
store cannot evaluate (substring matches, array containment, NOT) raise instead of being dropped,
because a silently ignored filter returns pages the caller meant to exclude.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

_SIMPLE = {
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
}
SUPPORTED_OPERATORS = sorted(
    op.value for op in (FilterOperator.EQ, FilterOperator.IS_EMPTY, *_SIMPLE)
)

StoreFilter = dict[str, Any]


class UnsupportedFilterError(ValueError):
    """A LlamaIndex filter the vrag store cannot evaluate; the message names it."""


def to_store_filter(filters: MetadataFilters | StoreFilter | None) -> StoreFilter | None:
    """A store filter dict for `filters`; dicts pass through unchanged (already store syntax)."""
    if filters is None:
        return None
    if isinstance(filters, dict):
        return filters
    if not isinstance(filters, MetadataFilters):
        raise TypeError(
            f"filters must be llama_index MetadataFilters or a store filter dict, "
            f"got {type(filters).__name__}"
        )
    return _group(filters)


def merge_filters(*parts: StoreFilter | None) -> StoreFilter | None:
    """The conjunction of the non-empty filters (None when there are none)."""
    present = [p for p in parts if p]
    if not present:
        return None
    return present[0] if len(present) == 1 else {"$and": present}


def _group(group: MetadataFilters) -> StoreFilter:
    if not group.filters:
        return {}
    condition = group.condition or FilterCondition.AND
    if condition == FilterCondition.NOT:
        raise UnsupportedFilterError(
            "FilterCondition.NOT is not supported by the vrag store; negate the operators "
            "instead (== -> !=, in -> nin, > -> <=)"
        )
    parts = [_group(f) if isinstance(f, MetadataFilters) else _single(f) for f in group.filters]
    parts = [p for p in parts if p]
    if len(parts) == 1:
        return parts[0]
    return {"$and" if condition == FilterCondition.AND else "$or": parts}


def _single(item: MetadataFilter) -> StoreFilter:
    op = item.operator
    if op == FilterOperator.EQ:
        return {item.key: {"$eq": item.value}}
    if op == FilterOperator.IS_EMPTY:
        return {item.key: None}  # missing or null
    if op in _SIMPLE:
        return {item.key: {_SIMPLE[op]: item.value}}
    raise UnsupportedFilterError(
        f"filter on {item.key!r}: operator {op.value!r} is not supported by the vrag store; "
        f"use one of {SUPPORTED_OPERATORS}"
    )
