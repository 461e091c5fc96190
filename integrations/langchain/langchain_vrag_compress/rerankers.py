"""`VragReranker`: a LangChain document compressor that reranks another retriever's documents
by late interaction (MaxSim) over page images, for `ContextualCompressionRetriever`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field
from vrag_compress import (
    RerankCandidate,
    RerankInputError,
    VisualIndex,
    rerank_order,
    rerank_scores,
)

SCORE_KEY = "relevance_score"
"""Where each reranked document's MaxSim score goes (the key LangChain's rerankers use)."""


class RerankWarning(UserWarning):
    """Some documents could not be scored; they come last, without a score."""


class VragReranker(BaseDocumentCompressor):
    """Rerank documents by MaxSim of the query against their page images.

    Use it as the ``base_compressor`` of `ContextualCompressionRetriever` over any retriever
    (BM25, a dense vector store, Qdrant): the store stays where it is. A document of a page
    ``index`` holds (its id or ``page_id``, or ``doc_id`` and ``page_no`` metadata) is scored on
    the page's stored compressed vectors, with no model run for the page; one carrying an image
    (``image_path``) or a PDF or Office file (``file_path`` or ``source``) and its page (1-based
    ``page_no``, a numeric ``page_label``, or ``page``, 0-based as LangChain's PDF loaders
    number pages) is rendered and encoded on the fly with the index's model and compressor; on
    an index of a text encoder, a document's text is scored as a page of that text.

    Returns the ``top_n`` best, each a copy with its score in ``relevance_score`` metadata.
    Documents that cannot be scored come after the others without one, and a `RerankWarning`
    names each and what it lacks.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: VisualIndex
    top_n: int = Field(default=5, ge=1)

    def compress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """The ``top_n`` documents by MaxSim score, best first."""
        if not documents:
            return []
        scores = rerank_scores(self.index, query, [document_candidate(d) for d in documents])
        problems = [str(s) for s in scores if isinstance(s, RerankInputError)]
        if problems:
            warnings.warn(
                f"{len(problems)} of {len(scores)} documents were not reranked (kept after the "
                "others, without a score): " + "; ".join(problems),
                RerankWarning,
                stacklevel=2,
            )
        order = rerank_order(scores)[: self.top_n]
        return [_scored(documents[i], scores[i]) for i in order]


def document_candidate(document: Document) -> RerankCandidate:
    """What a document tells about its page (see `VragReranker`)."""
    meta = document.metadata
    return RerankCandidate(
        page_id=meta.get("page_id") or document.id,
        doc_id=meta.get("doc_id"),
        page_no=_page_number(meta),
        image_path=meta.get("image_path"),
        file_path=meta.get("file_path") or meta.get("source"),
        text=document.page_content or None,
        name=f"document {document.id}" if document.id else None,
    )


def _page_number(meta: dict[str, Any]) -> int | None:
    """1-based: ``page_no`` (vrag-compress), a numeric ``page_label``, else ``page`` + 1 (the
    0-based page of LangChain's PDF loaders)."""
    for key, offset in (("page_no", 0), ("page_label", 0), ("page", 1)):
        value = meta.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value + offset
    return None


def _scored(document: Document, score: float | RerankInputError) -> Document:
    if isinstance(score, RerankInputError):
        return document
    metadata = {**document.metadata, SCORE_KEY: float(score)}
    return Document(id=document.id, page_content=document.page_content, metadata=metadata)
