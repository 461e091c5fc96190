"""Files on disk -> pages (PIL image + text layer), one page at a time.

The first pipeline stage. It validates every input up front so that a bad file fails here, with one
typed :class:`IngestError` naming the file, the reason and the fix, instead of deep inside a model.
PDFs are rendered lazily page by page (a 1,000-page PDF never sits in memory), with ``pypdfium2`` by
default or ``pdf2image`` (poppler) on request; images are opened lazily and converted to RGB; Office
files are converted to PDF by LibreOffice (`office`) and then rendered as PDFs.

Hostile input is refused per page with a reason instead of taking the machine down: a page whose
streams decode to more than a share of the page memory limit (a "decompression bomb") is not
loaded, pages are rendered no larger than that limit allows, and page shapes no page encoder
accepts (aspect ratio over 200:1) are refused before they reach one. Folders are walked lazily, so
a folder of any size is discovered in bounded memory.

Here: opening one file (`open_document`) and streaming every page under some paths
(`iter_pages`). The parts each live in their own module: `files` (suffixes, printable names),
`discovery` (walking folders), `errors`, `render` (options and memory limits), `pages` (the page
and document model), `pdf` and `images` (one document type each).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vrag_compress.ingest import office
from vrag_compress.ingest.discovery import check_file, check_suffix, iter_documents
from vrag_compress.ingest.errors import (
    IngestError,
    OfficeConversionError,
    OfficeUnavailableError,
    PageMemoryError,
    PageShapeError,
    UnreadablePathError,
)
from vrag_compress.ingest.files import OFFICE_SUFFIXES, PDF_SUFFIXES
from vrag_compress.ingest.images import ImageDocument, open_image
from vrag_compress.ingest.pages import Document, Page
from vrag_compress.ingest.pdf import PdfDocument, load_pdf, require_poppler
from vrag_compress.ingest.render import RenderOptions

log = logging.getLogger(__name__)


DOC_ID_LENGTH = 16
_CHUNK = 1 << 20


def content_hash(path: str | Path) -> str:
    """SHA-256 hex digest of the file's bytes, read in 1 MiB chunks (any file size, flat memory)."""
    path = Path(path)
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise UnreadablePathError(path, f"cannot be read ({exc.strerror or exc})") from exc
    return digest.hexdigest()


def open_document(
    path: str | Path,
    *,
    doc_id: str | None = None,
    render: RenderOptions | None = None,
    **settings: Any,
) -> Document:
    """Open and validate one PDF, image or Office file; raises an :class:`IngestError` subclass
    on bad input. LibreOffice converts an Office file to a PDF first (cached, see `office`): its
    pages are that PDF's, named after the original file.

    ``doc_id`` defaults to the first 16 hex digits of the content hash, so the same bytes get the
    same id anywhere. ``render`` (a :class:`RenderOptions`) or its fields as keyword arguments
    (``dpi=``, ``renderer=``, ``max_pixels=``, ``password=``, ``text=``, ``memory_limit=``) say
    how pages are rendered; bad values raise ValueError.
    """
    render = RenderOptions.of(render, settings, "open_document")
    if doc_id is not None and not (isinstance(doc_id, str) and doc_id.strip()):
        raise ValueError(f"doc_id must be a non-empty string, got {doc_id!r}")
    path = Path(path).expanduser()
    check_file(path)
    check_suffix(path)
    digest = content_hash(path)
    doc_id = doc_id or digest[:DOC_ID_LENGTH]
    if path.suffix.lower() in OFFICE_SUFFIXES:
        pdf_path = _office_pdf(path, digest)
        if render.renderer == "pdf2image":
            require_poppler(path)
        return PdfDocument(path, doc_id, digest, load_pdf(pdf_path, None), render, pdf_path)
    if path.suffix.lower() in PDF_SUFFIXES:
        if render.renderer == "pdf2image":
            require_poppler(path)
        return PdfDocument(path, doc_id, digest, load_pdf(path, render.password), render)
    image = open_image(path, render.max_pixels)
    return ImageDocument(path, doc_id, digest, image, render.max_pixels, render.page_memory())


def _office_pdf(path: Path, digest: str) -> Path:
    """The PDF LibreOffice makes of an Office file (cached by ``digest``), errors typed."""
    try:
        return office.to_pdf(path, digest)
    except office.LibreOfficeMissingError as exc:
        # the install line goes in the reason: indexing reports list reasons only
        reason = f"{exc.reason}; {exc.fix}"
        raise OfficeUnavailableError(path, reason, "then run the command again") from exc
    except office.ConversionError as exc:
        raise OfficeConversionError(path, exc.reason, exc.fix) from exc


def iter_pages(
    paths: Iterable[str | Path] | str | Path,
    *,
    render: RenderOptions | None = None,
    recursive: bool = True,
    errors: list[IngestError] | None = None,
    **settings: Any,
) -> Iterator[Page]:
    """Stream every page of every file under ``paths``; a bad file is reported and skipped.

    Errors go to ``errors`` when given, otherwise to the log as warnings. A file that breaks part
    way keeps the pages already yielded. ``render`` or its fields as keyword arguments: see
    `open_document`. Option errors (bad dpi, unknown renderer) raise before any file opens.
    """
    render = RenderOptions.of(render, settings, "iter_pages")
    return _iter_pages(paths, render, recursive, errors)


def _iter_pages(
    paths: Iterable[str | Path] | str | Path,
    render: RenderOptions,
    recursive: bool,
    errors: list[IngestError] | None,
) -> Iterator[Page]:
    for path in iter_documents(paths, recursive=recursive):
        if isinstance(path, IngestError):
            _report(path, errors)
            continue
        try:
            with open_document(path, render=render) as doc:
                for page_no in range(1, doc.n_pages + 1):
                    try:
                        page = doc.page(page_no)
                    except (PageMemoryError, PageShapeError) as error:
                        _report(error, errors)  # one refused page; the document's others go on
                        continue
                    yield page
        except IngestError as error:
            _report(error, errors)


def _report(error: IngestError, errors: list[IngestError] | None) -> None:
    if errors is None:
        log.warning("skipped %s", error)
    else:
        errors.append(error)
