"""The Qdrant backend: `QdrantStore` over a Qdrant collection (`store`), the collection's layout
and points (`schema`), the queries a search sends (`requests`), reaching a server or a local-mode
folder (`access`), and vetting a local-mode folder before qdrant-client unpickles it
(`local_mode`). The filter translation lives with the filter language
(`vrag_compress.store.filters.qdrant`).

`QdrantStore` loads on first use (PEP 562): importing `access` to read a URL does not import
qdrant-client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vrag_compress.store.qdrant.store import QdrantStore

__all__ = ["QdrantStore"]


def __getattr__(name: str) -> Any:
    """`QdrantStore`, imported on first access."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("vrag_compress.store.qdrant.store"), name)
