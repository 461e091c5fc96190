"""Multi-vector page stores: the `MultiVectorStore` protocol and the embedded `LocalStore`.

`LocalStore` and `StoreOptions` load on first use (PEP 562), so importing a store submodule
(the store's own modules import their siblings) never runs the whole embedded store first:
the package imports only the protocol, its errors and the input checks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vrag_compress.store.base import (
    DocumentRecord,
    DuplicatePageError,
    MultiVectorStore,
    OptimizableStore,
    PageNotFoundError,
    PageRecord,
    SearchResult,
    StoreClosedError,
    StoreConfigMismatch,
    StoreCorruptError,
    StoreError,
    StoreExistsError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    VerifyReport,
)
from vrag_compress.store.filters import FilterError
from vrag_compress.store.validate import StoreInputError

if TYPE_CHECKING:
    from vrag_compress.store.local.store import LocalStore, StoreOptions

_LAZY = {
    "LocalStore": "vrag_compress.store.local.store",
    "StoreOptions": "vrag_compress.store.local.store",
}

__all__ = [
    "DocumentRecord",
    "DuplicatePageError",
    "FilterError",
    "LocalStore",
    "MultiVectorStore",
    "OptimizableStore",
    "PageNotFoundError",
    "PageRecord",
    "SearchResult",
    "StoreClosedError",
    "StoreConfigMismatch",
    "StoreCorruptError",
    "StoreError",
    "StoreExistsError",
    "StoreInputError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreOptions",
    "StoreReadOnlyError",
    "VerifyReport",
]


def __getattr__(name: str) -> Any:
    """`LocalStore` and `StoreOptions`, imported on first access."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
