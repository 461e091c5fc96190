"""LlamaIndex retriever for vrag-compress (`llama-index-retrievers-vrag-compress`).

`CompressedColPaliRetriever`: a `BaseRetriever` over a `VisualIndex`, a `VragVectorStore` or a
`VectorStoreIndex` over one (sync and async). The vector store and the readers have their own
packages, as LlamaIndex names them: `llama_index.vector_stores.vrag_compress` and
`llama_index.readers.vrag_compress`; importing them from here still works, with a
`DeprecationWarning`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from llama_index.retrievers.vrag_compress.base import CompressedColPaliRetriever

__all__ = ["CompressedColPaliRetriever"]

# names this module exported before the vector store and readers got their own packages
_MOVED = {
    "VragVectorStore": "llama_index.vector_stores.vrag_compress",
    "StoreSideEmbedding": "llama_index.vector_stores.vrag_compress",
    "UnsupportedFilterError": "llama_index.vector_stores.vrag_compress",
    "to_store_filter": "llama_index.vector_stores.vrag_compress",
    "PDFPageReader": "llama_index.readers.vrag_compress",
    "PageImageNodeParser": "llama_index.readers.vrag_compress",
}


def __getattr__(name: str) -> Any:
    """The moved names, with a warning that says where they live now."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"importing {name} from {__name__} is deprecated: use `from {home} import {name}`",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
