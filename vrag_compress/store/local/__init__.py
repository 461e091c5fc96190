"""The embedded store (`LocalStore`): one folder with a SQLite catalog, fp16 segment files, the
candidate index's files and the text index. `store` is the public class; the other modules are
its parts (the write path, snapshots, search, crash safety, layout conversion, text engines).

`LocalStore` and `StoreOptions` load on first use (PEP 562), so importing one part (the catalog,
the segment files) does not import the whole store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vrag_compress.store.local.store import LocalStore, StoreOptions

__all__ = ["LocalStore", "StoreOptions"]


def __getattr__(name: str) -> Any:
    """`LocalStore` and `StoreOptions`, imported on first access."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("vrag_compress.store.local.store"), name)
