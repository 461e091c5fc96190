"""Reranking another retriever's hits by late interaction over page images: what the LlamaIndex
node postprocessor and the LangChain document compressor share.

A hit of another retriever (BM25, a dense index, Qdrant) becomes a `RerankCandidate`: a page
this index holds (by page id, or doc id and page number) is scored on its stored compressed
vectors; an image file, or a PDF (or Office) file and page number, is rendered and encoded on
the fly with the index's encoder and compressor (`VisualIndex.score_pages`); bare text, on an
index whose model reads page text, is encoded as a page of that text. A hit that is none of
these gets the reason instead of a score, and the others are scored all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from vrag_compress.encoders.base import ReadsPageText
from vrag_compress.ingest import IngestError, Page, open_document, page_id

if TYPE_CHECKING:
    from vrag_compress.index import VisualIndex

__all__ = ["RerankCandidate", "RerankInputError", "rerank_order", "rerank_scores"]

TEXT_PAGE_SIZE = (8, 8)
"""The placeholder image of a text-only candidate (a text encoder never looks at it)."""


class RerankInputError(ValueError):
    """A hit that cannot be scored: says what it lacks and what to give it."""


@dataclass(frozen=True)
class RerankCandidate:
    """What is known of one hit to rerank; the first that applies is used: ``page_id`` (or
    ``doc_id`` and ``page_no``) of a page the index holds, an image file (``image_path``), a
    PDF or Office file (``file_path``) and its 1-based ``page_no`` (page 1 for a one-page
    file), or ``text`` (an index whose model reads page text). ``name`` names it in errors."""

    page_id: str | None = None
    doc_id: str | None = None
    page_no: int | None = None
    image_path: str | None = None
    file_path: str | None = None
    text: str | None = None
    name: str | None = None


def rerank_scores(
    index: VisualIndex, query: str | np.ndarray, candidates: Sequence[RerankCandidate]
) -> list[float | RerankInputError]:
    """Each candidate's MaxSim score for ``query``, or the `RerankInputError` saying why it has
    none (one bad hit never stops the rest). An empty query raises `ValueError`."""
    if isinstance(query, str) and not query.strip():
        raise ValueError("empty query: give the words or question to rerank for")
    wanted = [i for c in candidates for i in _stored_ids(c)]
    held = {r.page_id for r in index.store.get(wanted, missing="skip")} if wanted else set()
    targets: list[str | Page | RerankInputError] = []
    for number, candidate in enumerate(candidates, start=1):
        try:
            targets.append(_target(index, candidate, held))
        except RerankInputError as error:
            targets.append(error)
        except (IngestError, IndexError, OSError, ValueError) as error:
            what = candidate.name or f"hit {number}"
            targets.append(RerankInputError(f"{what}: cannot render its page: {error}"))
    pages = [t for t in targets if not isinstance(t, RerankInputError)]
    scores = iter(index.score_pages(query, pages) if pages else [])
    return [t if isinstance(t, RerankInputError) else next(scores) for t in targets]


def rerank_order(scores: Sequence[float | RerankInputError]) -> list[int]:
    """Positions by score, best first (ties keep their order); hits without a score after all
    scored ones, in their original order."""
    scored = [i for i, s in enumerate(scores) if not isinstance(s, RerankInputError)]
    scored.sort(key=lambda i: -float(scores[i]))  # type: ignore[arg-type]
    return scored + [i for i, s in enumerate(scores) if isinstance(s, RerankInputError)]


def _stored_ids(candidate: RerankCandidate) -> list[str]:
    """The page ids under which the index may hold this candidate."""
    ids = [candidate.page_id] if candidate.page_id else []
    if candidate.doc_id and candidate.page_no is not None:
        ids.append(page_id(candidate.doc_id, candidate.page_no))
    return ids


def _target(index: VisualIndex, candidate: RerankCandidate, held: set[str]) -> str | Page:
    """A stored page id, or the page to encode on the fly."""
    for stored in _stored_ids(candidate):
        if stored in held:
            return stored
    if candidate.image_path:
        return _render(index, candidate.image_path, 1, candidate.text)
    if candidate.file_path:
        number = candidate.page_no
        if number is None:
            with open_document(candidate.file_path, dpi=index.dpi) as document:
                if document.n_pages != 1:
                    raise RerankInputError(
                        f"{candidate.name or candidate.file_path}: {candidate.file_path} has "
                        f"{document.n_pages} pages and the hit names none: give it a page number"
                    )
            number = 1
        return _render(index, candidate.file_path, number, candidate.text)
    if candidate.text and isinstance(index.encoder, ReadsPageText):
        image = Image.new("RGB", TEXT_PAGE_SIZE, "white")
        return Page("rerank-text", 1, image, candidate.text, Path("text"))
    what = candidate.name or "a hit"
    raise RerankInputError(
        f"{what}: nothing to score: not a page of {index.path} (no page_id or doc_id and "
        "page_no it holds), and no image_path, or file_path with a page number, to render"
        + ("" if candidate.text else ", and no text")
    )


def _render(index: VisualIndex, path: str, page_no: int, text: str | None) -> Page:
    """One page of a file, rendered as the index renders; a page without a text layer takes
    the hit's text (what a text encoder then reads)."""
    options: dict[str, Any] = {"dpi": index.dpi, "renderer": index.renderer}
    with open_document(path, **options) as document:
        page = document.page(page_no)
    if not (page.text or "").strip() and text:
        page.text = text
    return page
