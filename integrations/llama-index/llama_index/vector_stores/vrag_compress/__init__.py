"""`VragVectorStore` under LlamaIndex's vector-store naming convention
(`llama_index.vector_stores.<name>`); the same classes as `llama_index.retrievers.vrag_compress`."""

from llama_index.retrievers.vrag_compress.vector_store import StoreSideEmbedding, VragVectorStore

__all__ = ["StoreSideEmbedding", "VragVectorStore"]
