"""vrag_compress: compressed multi-vector Visual RAG (SAP / UOT) with a local MaxSim store.

Names are imported lazily so that ``import vrag_compress`` and ``vrag --help`` stay fast and
do not load torch or transformers until an encoder is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vrag_compress.version import __version__

_EXPORTS = {
    # the front door
    "VisualIndex": "vrag_compress.index",
    "Hit": "vrag_compress.index",
    "SearchMode": "vrag_compress.store.base",
    "AddReport": "vrag_compress.index",
    "VisualIndexError": "vrag_compress.index",
    "IndexOptions": "vrag_compress.index_config",
    "ModelMismatchError": "vrag_compress.index",
    # pages in
    "Page": "vrag_compress.ingest",
    "page_id": "vrag_compress.ingest",
    "find_documents": "vrag_compress.ingest",
    "open_document": "vrag_compress.ingest",
    "RenderOptions": "vrag_compress.ingest",
    "DEFAULT_DPI": "vrag_compress.ingest",
    "IngestError": "vrag_compress.ingest",
    "CorruptPDFError": "vrag_compress.ingest",
    "image_base64": "vrag_compress.ingest.page_assets",
    # encoders
    "Encoder": "vrag_compress.encoders.base",
    "PageEncoding": "vrag_compress.encoders.base",
    "EncoderLoadError": "vrag_compress.encoders.errors",
    # compression
    "CompressedPage": "vrag_compress.compress.base",
    "Compressor": "vrag_compress.compress.base",
    "BaseCompressor": "vrag_compress.compress.base",
    "get_compressor": "vrag_compress.compress",
    "compressor_for": "vrag_compress.compress",
    "list_compressors": "vrag_compress.compress",
    "register_compressor": "vrag_compress.compress",
    # answering from retrieved pages (chat models come from plugins)
    "AnswerPage": "vrag_compress.answering",
    "ChatModel": "vrag_compress.answering",
    "NoChatModelError": "vrag_compress.answering",
    "DEFAULT_SYSTEM_PROMPT": "vrag_compress.answering",
    "answer_messages": "vrag_compress.answering",
    "answer_pages": "vrag_compress.answering",
    "load_chat_model": "vrag_compress.answering",
    "page_blocks": "vrag_compress.answering",
    "page_label": "vrag_compress.answering",
    "region_label": "vrag_compress.answering",
    "page_reference": "vrag_compress.answering",
    "hit_pages": "vrag_compress.answering",
    "ImageQuery": "vrag_compress.image_query",
    "ImageQueryError": "vrag_compress.image_query",
    "cited_numbers": "vrag_compress.answering",
    "citations": "vrag_compress.answering",
    # reranking another retriever's hits (the LlamaIndex and LangChain rerankers)
    "RerankCandidate": "vrag_compress.rerank",
    "RerankInputError": "vrag_compress.rerank",
    "rerank_order": "vrag_compress.rerank",
    "rerank_scores": "vrag_compress.rerank",
    # scoring and calibration
    "maxsim": "vrag_compress.scoring",
    "score_retention": "vrag_compress.calibrate",
    "select_window": "vrag_compress.calibrate",
}

if TYPE_CHECKING:  # the real names for type checkers; at run time __getattr__ loads them
    from vrag_compress.answering import (
        DEFAULT_SYSTEM_PROMPT,
        AnswerPage,
        ChatModel,
        NoChatModelError,
        answer_messages,
        answer_pages,
        citations,
        cited_numbers,
        hit_pages,
        load_chat_model,
        page_blocks,
        page_label,
        page_reference,
        region_label,
    )
    from vrag_compress.calibrate import score_retention, select_window
    from vrag_compress.compress import (
        compressor_for,
        get_compressor,
        list_compressors,
        register_compressor,
    )
    from vrag_compress.compress.base import BaseCompressor, CompressedPage, Compressor
    from vrag_compress.encoders.base import Encoder, PageEncoding
    from vrag_compress.encoders.errors import EncoderLoadError
    from vrag_compress.image_query import ImageQuery, ImageQueryError
    from vrag_compress.index import (
        AddReport,
        Hit,
        ModelMismatchError,
        VisualIndex,
        VisualIndexError,
    )
    from vrag_compress.index_config import IndexOptions
    from vrag_compress.ingest import (
        DEFAULT_DPI,
        CorruptPDFError,
        IngestError,
        Page,
        RenderOptions,
        find_documents,
        open_document,
        page_id,
    )
    from vrag_compress.ingest.page_assets import image_base64
    from vrag_compress.rerank import (
        RerankCandidate,
        RerankInputError,
        rerank_order,
        rerank_scores,
    )
    from vrag_compress.scoring import maxsim
    from vrag_compress.store.base import SearchMode

__all__ = [  # literal, for type checkers; a test keeps it equal to _EXPORTS
    "__version__",
    "VisualIndex",
    "Hit",
    "SearchMode",
    "AddReport",
    "VisualIndexError",
    "IndexOptions",
    "ModelMismatchError",
    "Page",
    "page_id",
    "find_documents",
    "open_document",
    "RenderOptions",
    "DEFAULT_DPI",
    "IngestError",
    "CorruptPDFError",
    "image_base64",
    "Encoder",
    "PageEncoding",
    "EncoderLoadError",
    "CompressedPage",
    "Compressor",
    "BaseCompressor",
    "get_compressor",
    "compressor_for",
    "list_compressors",
    "register_compressor",
    "AnswerPage",
    "ChatModel",
    "NoChatModelError",
    "DEFAULT_SYSTEM_PROMPT",
    "answer_messages",
    "answer_pages",
    "load_chat_model",
    "page_blocks",
    "page_label",
    "region_label",
    "page_reference",
    "hit_pages",
    "ImageQuery",
    "ImageQueryError",
    "cited_numbers",
    "citations",
    "RerankCandidate",
    "RerankInputError",
    "rerank_order",
    "rerank_scores",
    "maxsim",
    "score_retention",
    "select_window",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vrag_compress' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
