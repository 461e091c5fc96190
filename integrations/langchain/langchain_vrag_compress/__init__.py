"""LangChain integration for vrag-compress: visual page retrieval over compressed Col* indexes."""

from langchain_vrag_compress._documents import hit_to_document
from langchain_vrag_compress.document_loaders import PDFPageLoader
from langchain_vrag_compress.qa import (
    DEFAULT_SYSTEM_PROMPT,
    LangChainChatModel,
    NoChatModelError,
    answer_pages,
    citations,
    create_visual_qa_chain,
    load_chat_model,
    load_vrag_chat_model,
    page_reference,
    pages_to_message,
    qa_messages,
)
from langchain_vrag_compress.rerankers import RerankWarning, VragReranker
from langchain_vrag_compress.retrievers import CompressedColPaliRetriever
from langchain_vrag_compress.vectorstores import EmbeddingsEncoder, VragStoreError, VragVectorStore

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "CompressedColPaliRetriever",
    "EmbeddingsEncoder",
    "LangChainChatModel",
    "NoChatModelError",
    "PDFPageLoader",
    "RerankWarning",
    "VragReranker",
    "VragStoreError",
    "VragVectorStore",
    "answer_pages",
    "citations",
    "create_visual_qa_chain",
    "hit_to_document",
    "load_chat_model",
    "load_vrag_chat_model",
    "page_reference",
    "pages_to_message",
    "qa_messages",
]
