"""PDFs -> pages with PDFium (or poppler on request): each page is checked before it loads (its
shape, and a decompression bomb by its decoded stream size), rendered within the page memory
limit and released."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

from vrag_compress.ingest.errors import (
    CorruptPDFError,
    EmptyDocumentError,
    EncryptedPDFError,
    IngestError,
    PageMemoryError,
    RendererUnavailableError,
    UnreadablePathError,
    UnsupportedFileError,
)
from vrag_compress.ingest.files import display_path, read_head, read_tail, sniff
from vrag_compress.ingest.pages import Document, Page, check_aspect, document_title
from vrag_compress.ingest.pdf_guard import PageBytes
from vrag_compress.ingest.render import STREAM_SHARE, RenderOptions, fit_scale, render_pixel_cap

log = logging.getLogger(__name__)


def _metadata_title(pdf: pdfium.PdfDocument) -> str | None:
    """The PDF's Title field; None when it cannot be read (a damaged info dictionary)."""
    try:
        return pdf.get_metadata_value("Title") or None
    except Exception:  # noqa: BLE001 (metadata is optional: never fail a document on it)
        return None


class PdfDocument(Document):
    """A PDF held open by PDFium; each page is loaded, rendered and released on its own."""

    kind = "pdf"

    def __init__(
        self,
        source: Path,
        doc_id: str,
        content_hash: str,
        pdf: pdfium.PdfDocument,
        render: RenderOptions,
        pdf_path: Path | None = None,
    ) -> None:
        super().__init__(source, doc_id, content_hash, len(pdf))
        self._pdf = pdf
        # the PDF file read: ``source`` itself, or the PDF an Office file was converted to
        self.pdf_path = pdf_path or source
        self.title = document_title(source, _metadata_title(pdf))
        self.dpi = render.dpi
        self.renderer = render.renderer
        self.max_pixels = render.max_pixels
        self.memory_limit = render.page_memory()
        self._password = render.password
        self._text = render.text
        self._page_bytes: PageBytes | None = None

    def _render(self, page_no: int) -> Page:
        self._check_page(page_no)
        try:
            page = self._pdf[page_no - 1]
        except pdfium.PdfiumError as exc:
            raise CorruptPDFError(self.source, f"page {page_no} cannot be loaded ({exc})") from exc
        try:
            width, height = page.get_size()
            if width <= 0 or height <= 0:
                raise CorruptPDFError(self.source, f"page {page_no} has an empty page box")
            scale = self._scale(page_no, width, height)
            image = self._rasterise(page, page_no, scale)
            text = _page_text(page) if self._text else None
        except pdfium.PdfiumError as exc:
            raise CorruptPDFError(
                self.source, f"page {page_no} cannot be rendered ({exc})"
            ) from exc
        finally:
            page.close()
        return Page(
            self.doc_id, page_no, image, text, self.source, dpi=scale * 72, title=self.title
        )

    def _check_page(self, page_no: int) -> None:
        """Refuse, before PDFium loads the page, a shape no encoder takes or a decompression
        bomb."""
        try:
            width, height = self._pdf.get_page_size(page_no - 1)
        except pdfium.PdfiumError as exc:
            raise CorruptPDFError(self.source, f"page {page_no} cannot be loaded ({exc})") from exc
        check_aspect(self.source, page_no, width, height, "pt")
        if self._page_bytes is None:
            self._page_bytes = PageBytes(self.pdf_path, self._password)
        budget = self.memory_limit // STREAM_SHARE
        decoded = self._page_bytes.decoded_bytes(page_no, budget)
        if decoded is not None and decoded > budget:
            reason = (
                f"page {page_no} decompresses to more than {_mib(budget)}"
                f" (1/{STREAM_SHARE} of the {_mib(self.memory_limit)} page memory limit)"
            )
            raise PageMemoryError(self.source, reason)

    def _scale(self, page_no: int, width: float, height: float) -> float:
        cap = render_pixel_cap(self.max_pixels, self.memory_limit)
        scale = fit_scale(width, height, self.dpi / 72, cap)
        if scale < self.dpi / 72:
            limit = (
                f"max_pixels={cap}"
                if cap == self.max_pixels
                else f"{cap:,} pixels (the {_mib(self.memory_limit)} page memory limit)"
            )
            log.warning(
                "%s: page %d (%.0fx%.0f pt) exceeds %s at %g dpi; rendering at %.1f dpi",
                display_path(self.source),
                page_no,
                width,
                height,
                limit,
                self.dpi,
                scale * 72,
            )
        return scale

    def _rasterise(self, page: pdfium.PdfPage, page_no: int, scale: float) -> Image.Image:
        if self.renderer == "pdf2image":
            return _render_poppler(self.pdf_path, page_no, scale * 72, self._password)
        image = page.render(scale=scale, may_draw_forms=True).to_pil()
        return image if image.mode == "RGB" else image.convert("RGB")

    def _close(self) -> None:
        self._pdf.close()


def load_pdf(path: Path, password: str | None) -> pdfium.PdfDocument:
    """Open with PDFium, mapping its failure codes to typed errors.

    The raw API is used because pypdfium2 reports a zero-page file with a stale error code (e.g. a
    previous file's "incorrect password"); here a failed load and an empty document are told apart.
    """
    head = read_head(path)
    if b"%PDF-" not in head:
        raise UnsupportedFileError(path, f"not a PDF: no %PDF- header{sniff(head)}")
    if b"%%EOF" not in read_tail(path):
        raise CorruptPDFError(path, "no %%EOF marker at the end: the file looks truncated")
    secret = None if password is None else (password + "\x00").encode("utf-8")
    raw = pdfium_c.FPDF_LoadDocument(os.fsencode(path.resolve()) + b"\x00", secret)
    if not raw:
        raise _load_error(path, pdfium_c.FPDF_GetLastError(), password)
    if pdfium_c.FPDF_GetPageCount(raw) < 1:
        pdfium_c.FPDF_CloseDocument(raw)
        raise EmptyDocumentError(path, "the PDF has zero pages")
    pdf = pdfium.PdfDocument(raw)
    pdf.init_forms()  # so filled-in form fields are drawn too
    return pdf


def _load_error(path: Path, code: int, password: str | None) -> IngestError:
    if code == pdfium_c.FPDF_ERR_PASSWORD:
        if password is None:
            return EncryptedPDFError(path, "the PDF is password-protected")
        reason, fix = "the password given does not open the PDF", "pass the right password=..."
        return EncryptedPDFError(path, reason, fix)
    if code == pdfium_c.FPDF_ERR_SECURITY:
        reason = "the PDF uses an unsupported security handler"
        return EncryptedPDFError(path, reason, "save an unencrypted copy")
    if code == pdfium_c.FPDF_ERR_FILE:
        return UnreadablePathError(path, "PDFium cannot read the file")
    reason = _PDFIUM_ERRORS.get(code, f"PDFium error code {code}")
    return CorruptPDFError(path, f"PDFium cannot parse it ({reason})")


_PDFIUM_ERRORS = {
    pdfium_c.FPDF_ERR_UNKNOWN: "unknown error",
    pdfium_c.FPDF_ERR_FORMAT: "damaged or not a PDF",
    pdfium_c.FPDF_ERR_PAGE: "page not found or content error",
}


def _page_text(page: pdfium.PdfPage) -> str | None:
    textpage = page.get_textpage()
    try:
        return normalise_text(textpage.get_text_range())
    finally:
        textpage.close()


def normalise_text(raw: str) -> str | None:
    """Light clean-up of a PDF text layer: one space between words, at most one blank line."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    lines = (" ".join(line.split()) for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return text or None


def require_poppler(path: Path) -> None:
    """Raise RendererUnavailableError unless pdf2image and poppler's pdftoppm are installed, so
    ``renderer="pdf2image"`` fails when the document opens rather than on its first page."""
    try:
        import pdf2image  # noqa: F401
    except ImportError as exc:
        raise RendererUnavailableError(path, "renderer 'pdf2image' is not installed") from exc
    if shutil.which("pdftoppm") is None:
        reason = "renderer 'pdf2image' needs poppler's pdftoppm on PATH"
        raise RendererUnavailableError(path, reason)


def _render_poppler(path: Path, page_no: int, dpi: float, password: str | None) -> Image.Image:
    from pdf2image import convert_from_path
    from pdf2image.exceptions import PDFInfoNotInstalledError

    try:
        # a dict: pdf2image's hints say int/str, but it passes fractional DPIs and None on as given
        options: dict[str, Any] = {"dpi": dpi, "userpw": password}
        images = convert_from_path(path, first_page=page_no, last_page=page_no, **options)
    except PDFInfoNotInstalledError as exc:
        raise RendererUnavailableError(path, "poppler (pdfinfo/pdftoppm) is not installed") from exc
    except Exception as exc:  # pdf2image raises several unrelated types for poppler failures
        raise CorruptPDFError(path, f"poppler cannot render page {page_no} ({exc})") from exc
    if len(images) != 1:
        raise CorruptPDFError(path, f"poppler rendered {len(images)} images for page {page_no}")
    return images[0].convert("RGB")


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"
