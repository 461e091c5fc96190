"""Which pages an estimate reads: a seeded sample of an index's pages or of a folder's, drawn
before any page is rendered, and the size of the source it stands for."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.estimate.pseudo_queries import reads_text
from vrag_compress.estimate.report import EstimateError

log = logging.getLogger(__name__)


Sample = tuple[list[str | None], list[Any], int]
"""One page sample: the pages' texts, their images (empty for text encoders) and the number of
pages in the source it was drawn from."""


def too_few(n_pages: int, source: Any) -> None:
    """A source of fewer than 2 pages cannot be estimated on, however many pages are sampled."""
    if n_pages < 2:
        raise EstimateError(
            f"{source}: {n_pages} page(s); the estimate ranks pages against each other, so it "
            "needs a source of at least 2 pages"
        )


def index_sample(index: Any, ids: list[str], sample: int, seed: int) -> Sample:
    """``sample`` of the index's pages drawn with ``seed``: their text, and their images when
    the index's encoder reads images."""
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(ids), min(sample, len(ids)), replace=False).tolist())
    records = index.store.get([ids[i] for i in picked], missing="skip")
    images: list[Any] = []
    if not reads_text(index.encoder):
        images = [
            index.assets.load(r.image_ref, r.metadata.get("source"), r.page_no) for r in records
        ]
    return [r.text for r in records], images, len(ids)


def folder_sample(path: Path, sample: int, seed: int) -> Sample:
    """``sample`` pages drawn evenly at random from every page under ``path``, and the number of
    pages there: the documents' page counts are read first (opening a PDF reads no page), then
    only the drawn pages are rendered. An unreadable document or page is logged and skipped."""
    from vrag_compress.ingest import find_documents

    counts = _page_counts(find_documents(path)[0])
    total = sum(n for _, n in counts)
    if total == 0:
        raise EstimateError(f"{path}: no readable page (PDFs or images) to estimate on")
    too_few(total, path)
    rng = np.random.default_rng(seed)
    drawn = np.sort(rng.choice(total, min(sample, total), replace=False))
    starts = np.cumsum([0] + [n for _, n in counts])
    kept: list[Any] = []
    for i, (doc, _) in enumerate(counts):
        wanted = drawn[(drawn >= starts[i]) & (drawn < starts[i + 1])] - starts[i] + 1
        if len(wanted):
            kept += render_pages(doc, [int(n) for n in wanted])
    return [p.text for p in kept], [p.image for p in kept], total


def _page_counts(documents: list[Path]) -> list[tuple[Path, int]]:
    from vrag_compress.ingest import IngestError, open_document

    counts = []
    for doc in documents:
        try:
            with open_document(doc) as opened:
                counts.append((doc, opened.n_pages))
        except IngestError as error:
            log.warning("%s", error)
    return counts


def render_pages(path: Path, page_nos: list[int]) -> list[Any]:
    from vrag_compress.ingest import IngestError, open_document

    pages = []
    try:
        with open_document(path) as doc:
            for page_no in page_nos:
                try:
                    pages.append(doc.page(page_no))
                except IngestError as error:  # one refused page; the others go on
                    log.warning("%s", error)
    except IngestError as error:
        log.warning("%s", error)
    return pages
