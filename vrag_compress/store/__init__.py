"""Multi-vector page stores: the `MultiVectorStore` protocol and the embedded `LocalStore`."""

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
from vrag_compress.store.local import LocalStore, StoreOptions
from vrag_compress.store.validate import StoreInputError

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
