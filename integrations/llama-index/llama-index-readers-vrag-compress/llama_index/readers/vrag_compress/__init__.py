"""LlamaIndex readers for vrag-compress (`llama-index-readers-vrag-compress`).

- `PDFPageReader`: PDFs and page images to one `Document` per file, keyed by content hash.
- `PageImageNodeParser`: documents to one `ImageNode` per page, the node the vrag-compress
  vector store (`llama_index.vector_stores.vrag_compress`) indexes.
"""

from llama_index.readers.vrag_compress.base import PageImageNodeParser, PDFPageReader

__all__ = ["PDFPageReader", "PageImageNodeParser"]
