"""LlamaIndex vector store for vrag-compress (`llama-index-vector-stores-vrag-compress`).

- `VragVectorStore`: a compressed ColPali-family `VisualIndex` as a `VectorStoreIndex` backend.
- `StoreSideEmbedding`: the `embed_model` to pass with it (the store embeds pages itself).
- `to_store_filter` / `UnsupportedFilterError`: LlamaIndex `MetadataFilters` to store filters.
"""

from llama_index.vector_stores.vrag_compress.base import StoreSideEmbedding, VragVectorStore
from llama_index.vector_stores.vrag_compress.filters import UnsupportedFilterError, to_store_filter

__all__ = ["StoreSideEmbedding", "UnsupportedFilterError", "VragVectorStore", "to_store_filter"]
