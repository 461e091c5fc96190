"""The readers under LlamaIndex's reader naming convention (`llama_index.readers.<name>`); the
same classes as `llama_index.retrievers.vrag_compress`."""

from llama_index.retrievers.vrag_compress.readers import PageImageNodeParser, PDFPageReader

__all__ = ["PDFPageReader", "PageImageNodeParser"]
