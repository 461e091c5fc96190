"""LlamaIndex integration for vrag-compress: compressed ColPali-family Visual RAG.

- `PDFPageReader`, `PageImageNodeParser`: files or documents to one `ImageNode` per page.
- `CompressedColPaliRetriever`: a `BaseRetriever` over a `VisualIndex` (sync and async).
- `VragVectorStore` (+ `StoreSideEmbedding`): the index as a `VectorStoreIndex` backend.
"""

from llama_index.retrievers.vrag_compress.filters import UnsupportedFilterError, to_store_filter
from llama_index.retrievers.vrag_compress.readers import PageImageNodeParser, PDFPageReader
from llama_index.retrievers.vrag_compress.retriever import CompressedColPaliRetriever
from llama_index.retrievers.vrag_compress.vector_store import StoreSideEmbedding, VragVectorStore

__all__ = [
    "CompressedColPaliRetriever",
    "PDFPageReader",
    "PageImageNodeParser",
    "StoreSideEmbedding",
    "UnsupportedFilterError",
    "VragVectorStore",
    "to_store_filter",
]
