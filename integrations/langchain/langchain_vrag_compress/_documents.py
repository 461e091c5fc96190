"""Index hits and stored pages as LangChain `Document`s.

Two kinds of entries live in a `VisualIndex` reached through LangChain: *pages* (a page image
encoded by the Col* model; `page_content` is the page text, its text layer or OCR text, see
`vrag_compress.ingest.ocr`) and *texts* (added with `add_texts`/`add_documents`; their metadata must
round-trip exactly, so a reserved key marks them and is stripped again on the way out).
"""

from __future__ import annotations

import hashlib

from langchain_core.documents import Document
from vrag_compress import AnswerPage, Hit

KIND_KEY = "_vrag_kind"
TEXT_KIND = "text"


def entry_doc_id(entry_id: str) -> str:
    """A file-system-safe document id for a LangChain id (page images are stored under it)."""
    return "lc-" + hashlib.sha256(entry_id.encode()).hexdigest()[:16]


def hit_to_document(
    hit: Hit,
    *,
    with_score: bool = True,
    image_base64: bool = False,
    image_format: str = "jpeg",
    image_max_side: int | None = 1024,
) -> Document:
    """A `Document` for one hit: texts come back as added; pages carry page, source and image
    (the metadata of `vrag_compress.AnswerPage.from_hit`)."""
    if hit.metadata.get(KIND_KEY) == TEXT_KIND:
        metadata = {k: v for k, v in hit.metadata.items() if k != KIND_KEY}
        if hit.components is not None:  # text / hybrid search: each side's rank and score
            metadata["search_components"] = hit.components
        if with_score:
            metadata["score"] = hit.score
        return Document(id=hit.page_id, page_content=hit.text or "", metadata=metadata)
    page = AnswerPage.from_hit(
        hit,
        with_score=with_score,
        image_base64=image_base64,
        image_format=image_format,
        image_max_side=image_max_side,
    )
    return Document(id=page.id, page_content=page.text, metadata=dict(page.metadata))
