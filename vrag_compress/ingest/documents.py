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
"""

from __future__ import annotations

import errno
import hashlib
import logging
import math
import os
import re
import shutil
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image, ImageOps, UnidentifiedImageError

from vrag_compress.defaults import DEFAULT_DPI, DEFAULT_RENDERER, RENDERERS
from vrag_compress.ingest import office
from vrag_compress.ingest.pdf_guard import PageBytes

log = logging.getLogger(__name__)

PDF_SUFFIXES = frozenset({".pdf"})
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp"})
# Word, slide and spreadsheet files: LibreOffice converts them to PDF first (`office`).
OFFICE_SUFFIXES = office.OFFICE_SUFFIXES
SUPPORTED_SUFFIXES = PDF_SUFFIXES | IMAGE_SUFFIXES | OFFICE_SUFFIXES
# Pillow's own decompression-bomb warning threshold (about 9,459 x 9,459 pixels, ~270 MB as RGB).
DEFAULT_MAX_PIXELS = 89_478_485
DOC_ID_LENGTH = 16
# Memory one page may take while it is decoded and rendered (1 GiB: safe on a 4 GB machine that
# also holds a model). Override per call with memory_limit=, or with VRAG_PAGE_MEMORY_MB.
DEFAULT_MEMORY_LIMIT = 1 << 30
MEMORY_LIMIT_ENV = "VRAG_PAGE_MEMORY_MB"
# Share of the limit a page's decoded streams may use: PDFium grows its buffers by doubling and
# keeps the parsed page beside them.
STREAM_SHARE = 4
# Bytes one rendered pixel costs downstream: 4 in PDFium's bitmap, 3 in the RGB image, and float
# copies in the encoder's processor.
BYTES_PER_RENDERED_PIXEL = 64
# Qwen2-VL-style processors refuse anything narrower; no page encoder reads such a strip usefully.
MAX_ASPECT_RATIO = 200

_CHUNK = 1 << 20
# Readers such as Acrobat accept the PDF header and the %%EOF marker within 1 KiB of the file ends.
_MARKER_WINDOW = 1024
_SUPPORTED_TEXT = " ".join(sorted(SUPPORTED_SUFFIXES))
_SIGNATURES = (
    (b"%PDF-", "a PDF"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"PK\x03\x04", "a ZIP archive (e.g. .docx/.xlsx/.pptx)"),
    (b"GIF8", "a GIF image"),
    (b"\xd0\xcf\x11\xe0", "an old Office file (.doc/.xls)"),
)


# --- errors -------------------------------------------------------------------------------------


class IngestError(Exception):
    """A file that cannot become pages; ``str()`` reads ``"<path>: <reason> (<how to fix>)"``."""

    fix: str = "check the file"

    def __init__(self, path: str | Path, reason: str, fix: str | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.fix = fix or type(self).fix
        super().__init__(f"{display_path(self.path)}: {reason} ({self.fix})")

    def __reduce__(self):  # keep the error picklable across processes despite the custom __init__
        return (type(self), (self.path, self.reason, self.fix))


class EncryptedPDFError(IngestError):
    """The PDF is password-protected and no (or a wrong) password was given."""

    fix = "pass password=... to open it, or save an unencrypted copy"


class CorruptPDFError(IngestError):
    """The PDF (or one of its pages) cannot be parsed or rendered."""

    fix = "re-download or re-export the PDF; `qpdf --check FILE` shows the damage"


class CorruptImageError(IngestError):
    """The image file cannot be decoded."""

    fix = "re-download or re-export the image"


class EmptyDocumentError(IngestError):
    """The file has no pages."""

    fix = "the file has no pages; remove it from the input"


class UnsupportedFileError(IngestError):
    """Not a PDF or a supported image (by suffix and by content)."""

    fix = f"supported files: {_SUPPORTED_TEXT}"


class OfficeConversionError(IngestError):
    """An Office file LibreOffice cannot turn into a PDF within the caps (damaged,
    password-protected, a zip bomb, too many pages, too slow)."""

    fix = "open it in its application and save a fresh copy, or export a PDF"


class OfficeUnavailableError(OfficeConversionError):
    """An Office file on a machine without LibreOffice."""

    fix = office.INSTALL_HINT


class ImageTooLargeError(IngestError):
    """An image with more pixels than ``max_pixels`` (a decompression bomb's shape)."""

    fix = "downscale the image, or raise max_pixels if you trust the file"


class UnreadablePathError(IngestError):
    """The path is missing, not a regular file, or not readable by this process."""

    fix = "check that the path exists, is a file and is readable by this user"


class PageMemoryError(IngestError):
    """A page whose streams would take more than its share of the page memory limit."""

    fix = (
        f"a decompression bomb? raise the page memory limit (memory_limit=, or {MEMORY_LIMIT_ENV})"
        " only if you trust the file"
    )


class PageShapeError(IngestError):
    """A page too long and thin for any encoder (aspect ratio above MAX_ASPECT_RATIO)."""

    fix = f"crop or split the page: page encoders accept aspect ratios up to {MAX_ASPECT_RATIO}:1"


class RendererUnavailableError(IngestError):
    """``renderer='pdf2image'`` without the pdf2image package or poppler's pdftoppm."""

    fix = (
        "pip install 'vrag-compress[pdf2image]' and apt-get install poppler-utils,"
        " or use renderer='pypdfium2'"
    )


# --- pages and documents ------------------------------------------------------------------------


@dataclass(eq=False)
class Page:
    """One rendered page; ``page_no`` is 1-based, ``dpi`` the effective render DPI (PDFs only)."""

    doc_id: str
    page_no: int
    image: Image.Image
    text: str | None
    source: Path
    dpi: float | None = None
    title: str | None = None
    """The document's name (`document_title`). Text encoders read it ahead of the page text, so
    table pages and pages without a heading are found by what their document is called."""

    @property
    def width(self) -> int:
        """Image width in pixels."""
        return self.image.width

    @property
    def height(self) -> int:
        """Image height in pixels."""
        return self.image.height

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in pixels."""
        return self.image.size

    @property
    def key(self) -> tuple[str, int]:
        """The page's identity in an index: ``(doc_id, page_no)``."""
        return (self.doc_id, self.page_no)

    @property
    def page_id(self) -> str:
        """The page's default id in an index (and in the framework adapters)."""
        return page_id(self.doc_id, self.page_no)


@dataclass(frozen=True)
class RenderOptions:
    """How documents are opened and their pages rendered: one object that `open_document`,
    `iter_pages` and `PdfDocument` pass whole (keyword arguments of the same names build one).

    ``text=False`` skips the PDF text layer. ``memory_limit`` (bytes; None: the
    :func:`default_memory_limit` when a document opens) bounds what one page may take: pages
    whose streams decode to more than a quarter of it are refused, larger pages are rendered at
    a lower DPI."""

    dpi: float = DEFAULT_DPI
    renderer: str = DEFAULT_RENDERER
    max_pixels: int = DEFAULT_MAX_PIXELS
    password: str | None = field(default=None, repr=False)
    text: bool = True
    memory_limit: int | None = None

    @classmethod
    def of(cls, base: RenderOptions | None, settings: dict[str, Any], where: str) -> RenderOptions:
        """``base`` (or the defaults) with ``settings`` (field names) applied, checked; an
        unknown name is a TypeError naming ``where`` and the fields."""
        unknown = sorted(set(settings) - {f.name for f in fields(cls)})
        if unknown:
            names = ", ".join(f.name for f in fields(cls))
            raise TypeError(f"{where}() got unknown render option {', '.join(unknown)}: {names}")
        options = replace(base or cls(), **settings)
        options.check()
        return options

    def check(self) -> None:
        """Raise ValueError on an unknown renderer or a non-positive dpi, pixel cap or limit."""
        if self.renderer not in RENDERERS:
            known = ", ".join(RENDERERS)
            raise ValueError(f"unknown renderer {self.renderer!r}; choose one of {known}")
        if not self.dpi > 0:
            raise ValueError(f"dpi must be positive, got {self.dpi!r}")
        if self.max_pixels < 1:
            raise ValueError(f"max_pixels must be positive, got {self.max_pixels!r}")
        if self.memory_limit is not None and self.memory_limit < 1:
            raise ValueError(f"memory_limit must be positive, got {self.memory_limit!r}")

    def page_memory(self) -> int:
        """The page memory limit in bytes (``memory_limit``, else the default for this run)."""
        return default_memory_limit() if self.memory_limit is None else self.memory_limit


def page_id(doc_id: str, page_no: int) -> str:
    """The default id of page ``page_no`` of document ``doc_id``: ``<doc_id>:<page_no>``."""
    return f"{doc_id}:{page_no}"


def document_title(source: Path, metadata_title: str | None = None) -> str:
    """What a document is called: its PDF Title when that reads as words (not an empty field or
    a file name such as ``10811.exe``), then its file name with separators as spaces
    (``nics-background-checks-2015-11.pdf`` -> ``nics background checks 2015 11``)."""
    name = " ".join(part for part in re.split(r"[-_.\s]+", source.stem) if part)
    title = " ".join((metadata_title or "").split())
    reads_as_words = len(re.findall(r"[^\W\d_]{2,}", title)) >= 2
    file_like = re.search(r"\.[A-Za-z0-9]{2,4}$", title) is not None
    if reads_as_words and not file_like and title.lower() != name.lower():
        return f"{title}. {name}"
    return name


def with_title(title: str | None, text: str | None) -> str | None:
    """``text`` behind ``title`` on its own line; None or blank text stays as it is."""
    if not text or not text.strip() or not title:
        return text
    return f"{title}\n{text}"


class Document:
    """An opened, validated file whose pages render lazily, one at a time.

    Not thread-safe (PDFium is not): use one Document per thread.
    """

    kind: ClassVar[Literal["pdf", "image"]]

    def __init__(self, source: Path, doc_id: str, content_hash: str, n_pages: int) -> None:
        self.source = source
        self.doc_id = doc_id
        self.content_hash = content_hash
        self.n_pages = n_pages
        self.closed = False
        self.title = document_title(source)

    def page(self, page_no: int) -> Page:
        """Render one page (1-based)."""
        if not 1 <= page_no <= self.n_pages:
            raise IndexError(f"{self.source}: page {page_no} out of range 1..{self.n_pages}")
        if self.closed:
            raise ValueError(f"{self.source}: document is closed")
        return self._render(page_no)

    def iter_pages(self, start: int = 1) -> Iterator[Page]:
        """Yield pages ``start..n_pages`` one at a time; ``start`` resumes an interrupted run."""
        if not 1 <= start <= self.n_pages + 1:
            raise ValueError(f"{self.source}: start={start} out of range 1..{self.n_pages + 1}")
        for page_no in range(start, self.n_pages + 1):
            yield self.page(page_no)

    def close(self) -> None:
        """Release the file (further page reads raise); closing twice is a no-op."""
        if not self.closed:
            self.closed = True
            self._close()

    def __len__(self) -> int:
        return self.n_pages

    def __enter__(self) -> Document:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(doc_id={self.doc_id!r}, kind={self.kind!r}, "
            f"n_pages={self.n_pages}, source={str(self.source)!r})"
        )

    def _render(self, page_no: int) -> Page:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


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
        _check_aspect(self.source, page_no, width, height, "pt")
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


class ImageDocument(Document):
    """A raster image file; every frame of a multi-frame TIFF is a page, other formats have one."""

    kind = "image"

    def __init__(
        self,
        source: Path,
        doc_id: str,
        content_hash: str,
        image: Image.Image,
        max_pixels: int,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
    ) -> None:
        n_frames = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
        super().__init__(source, doc_id, content_hash, n_frames)
        self._image = image
        self.max_pixels = max_pixels
        self.memory_limit = memory_limit

    def _render(self, page_no: int) -> Page:
        try:
            with _pillow_guard(self.source):
                self._image.seek(page_no - 1)
                _check_pixels(self.source, self._image.size, self.max_pixels, page_no)
                _check_aspect(self.source, page_no, *self._image.size, "px")
                self._image.load()
                image = _fit(to_rgb(self._image), render_pixel_cap(None, self.memory_limit))
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise CorruptImageError(
                self.source, f"frame {page_no} cannot be decoded ({exc})"
            ) from exc
        return Page(self.doc_id, page_no, image, None, self.source, title=self.title)

    def _close(self) -> None:
        self._image.close()


# --- public functions ---------------------------------------------------------------------------


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


def find_documents(
    paths: Iterable[str | Path] | str | Path, *, recursive: bool = True
) -> tuple[list[Path], list[IngestError]]:
    """Expand files and folders into a sorted, de-duplicated list of supported files.

    Explicit paths that are missing, unreadable or unsupported come back as errors; inside folders,
    unsupported and hidden files are skipped silently (a folder of mixed files is normal).
    """
    found: list[Path] = []
    errors: list[IngestError] = []
    for item in iter_documents(paths, recursive=recursive):
        if isinstance(item, IngestError):
            errors.append(item)
        else:
            found.append(item)
    return found, errors


def iter_documents(
    paths: Iterable[str | Path] | str | Path,
    *,
    recursive: bool = True,
    unsupported: dict[str, int] | None = None,
) -> Iterator[Path | IngestError]:
    """:func:`find_documents` as a stream: each supported file, or the error of a path that cannot
    be used, as soon as the walk reaches it. Memory stays flat whatever the folder size (a file seen
    twice, through two arguments or links, is yielded once). ``unsupported``, when given, counts
    the unsupported files skipped inside folders by suffix (``{".docx": 2, "(no suffix)": 1}``)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    seen: set[tuple[int, int]] = set()
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            candidates: Iterable[Path | IngestError] = _walk(path, recursive, unsupported)
        else:
            candidates = [_checked(path)]
        for item in candidates:
            if isinstance(item, IngestError):
                yield item
                continue
            key = _identity(item)
            if isinstance(key, IngestError):
                yield key
            elif key not in seen:
                seen.add(key)
                yield item


def display_path(path: str | Path) -> str:
    r"""``path`` as text that is safe to print, log and store in a database: bytes of a file name
    that are not valid UTF-8 (an old Latin-1 name, say) appear as ``\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def source_path(text: str) -> Path:
    r"""The file a :func:`display_path` text names: the text itself when such a file exists, else
    with its ``\xNN`` escapes turned back into the raw bytes of the file name."""
    path = Path(text)
    if path.exists() or "\\x" not in text:
        return path
    raw = re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m[1], 16)]), text.encode("utf-8"))
    return Path(os.fsdecode(raw))


def default_memory_limit() -> int:
    """The page memory limit in bytes: ``VRAG_PAGE_MEMORY_MB`` when set, else 1 GiB."""
    value = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if not value:
        return DEFAULT_MEMORY_LIMIT
    try:
        megabytes = float(value)
    except ValueError:
        raise ValueError(f"{MEMORY_LIMIT_ENV}={value!r} is not a number of megabytes") from None
    if not megabytes > 0:
        raise ValueError(f"{MEMORY_LIMIT_ENV}={value!r} must be a positive number of megabytes")
    return int(megabytes * 2**20)


def render_pixel_cap(max_pixels: int | None, memory_limit: int) -> int:
    """The most pixels a page may be rendered with: ``max_pixels``, and no more than the page
    memory limit allows at :data:`BYTES_PER_RENDERED_PIXEL`."""
    cap = max(1, memory_limit // BYTES_PER_RENDERED_PIXEL)
    return cap if max_pixels is None else min(max_pixels, cap)


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
    _check_file(path)
    _check_suffix(path)
    digest = content_hash(path)
    doc_id = doc_id or digest[:DOC_ID_LENGTH]
    if path.suffix.lower() in OFFICE_SUFFIXES:
        pdf_path = _office_pdf(path, digest)
        if render.renderer == "pdf2image":
            _require_poppler(path)
        return PdfDocument(path, doc_id, digest, _load_pdf(pdf_path, None), render, pdf_path)
    if path.suffix.lower() in PDF_SUFFIXES:
        if render.renderer == "pdf2image":
            _require_poppler(path)
        return PdfDocument(path, doc_id, digest, _load_pdf(path, render.password), render)
    image = _open_image(path, render.max_pixels)
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


def fit_scale(width: float, height: float, scale: float, max_pixels: int) -> float:
    """The largest scale <= ``scale`` whose rendered page (ceil-rounded) fits in ``max_pixels``."""
    if _pixels(width, height, scale) <= max_pixels:
        return scale
    scale = math.sqrt(max_pixels / (width * height))
    while _pixels(width, height, scale) > max_pixels:
        scale *= 0.999
    return scale


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB copy of any Pillow image: EXIF rotation applied, alpha over white, 16-bit scaled to 8."""
    image = ImageOps.exif_transpose(image)
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        image = _to_8bit(image)
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


# --- helpers ------------------------------------------------------------------------------------


def _check_file(path: Path) -> None:
    """Raise UnreadablePathError unless ``path`` is a regular file this process can open."""
    if not path.exists():
        if path.is_symlink():
            raise UnreadablePathError(path, _link_problem(path, _stat_error(path)))
        raise UnreadablePathError(path, "does not exist")
    if path.is_dir():
        fix = "pass folders to find_documents or iter_pages"
        raise UnreadablePathError(path, "is a directory, expected a file", fix)
    if not path.is_file():
        raise UnreadablePathError(path, "is not a regular file (socket, device or pipe)")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise UnreadablePathError(path, f"cannot be read ({exc.strerror or exc})") from exc


def _check_suffix(path: Path) -> None:
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        what = _sniff(_read_head(path))
        suffix = path.suffix or "(no suffix)"
        raise UnsupportedFileError(path, f"unsupported file type {suffix!r}{what}")


def _checked(path: Path) -> Path | IngestError:
    try:
        _check_file(path)
        _check_suffix(path)
    except IngestError as exc:
        return exc
    return path


def _walk(
    folder: Path, recursive: bool, unsupported: dict[str, int] | None = None
) -> Iterator[Path | IngestError]:
    """Supported, non-hidden files under ``folder``, each folder's sorted, as the walk reaches
    them; unreadable subfolders are errors, other files are counted in ``unsupported`` by
    suffix. Symlinked folders are not followed (no loops)."""
    errors: list[IngestError] = []

    def on_error(exc: OSError) -> None:
        reason = f"folder cannot be listed ({exc.strerror})"
        errors.append(UnreadablePathError(exc.filename or folder, reason))

    for root, dirs, files in os.walk(folder, onerror=on_error):
        yield from errors
        errors.clear()
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        for name in sorted(files):
            path = Path(root) / name
            if name.startswith("."):
                continue
            suffix = path.suffix.lower()
            if suffix in SUPPORTED_SUFFIXES:
                yield path
            elif unsupported is not None:
                kind = suffix or "(no suffix)"
                unsupported[kind] = unsupported.get(kind, 0) + 1
    yield from errors


def _identity(path: Path) -> tuple[int, int] | IngestError:
    """The file's (device, inode), so one file reached twice is indexed once; a symlink loop or a
    dangling link is an error here rather than a crash later."""
    try:
        stat = path.stat()
    except OSError as exc:
        return UnreadablePathError(path, _link_problem(path, exc))
    return (stat.st_dev, stat.st_ino)


def _link_problem(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symlink loop"
    if path.is_symlink():
        return f"is a symlink to a missing file ({os.readlink(path)!r})"
    return f"cannot be read ({exc.strerror or exc})"


def _stat_error(path: Path) -> OSError:
    try:
        path.stat()
    except OSError as exc:
        return exc
    return OSError(errno.ENOENT, "does not exist")


def _read_head(path: Path, size: int = _MARKER_WINDOW) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def _read_tail(path: Path, size: int = _MARKER_WINDOW) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read()


def _sniff(head: bytes) -> str:
    """A hint for error messages: what the bytes look like."""
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return f"; the content looks like {name}"
    if head[:8] == b"RIFF" or head[8:12] == b"WEBP":
        return "; the content looks like a WebP image"
    if not head:
        return "; the file is empty"
    if b"\x00" not in head[:512]:
        return "; the content looks like plain text"
    return ""


def _load_pdf(path: Path, password: str | None) -> pdfium.PdfDocument:
    """Open with PDFium, mapping its failure codes to typed errors.

    The raw API is used because pypdfium2 reports a zero-page file with a stale error code (e.g. a
    previous file's "incorrect password"); here a failed load and an empty document are told apart.
    """
    head = _read_head(path)
    if b"%PDF-" not in head:
        raise UnsupportedFileError(path, f"not a PDF: no %PDF- header{_sniff(head)}")
    if b"%%EOF" not in _read_tail(path):
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


def _require_poppler(path: Path) -> None:
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


def _open_image(path: Path, max_pixels: int) -> Image.Image:
    try:
        with _pillow_guard(path):
            image = Image.open(path)
    except UnidentifiedImageError as exc:
        what = _sniff(_read_head(path))
        raise UnsupportedFileError(path, f"not a readable image{what}") from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise CorruptImageError(path, f"the image header cannot be read ({exc})") from exc
    try:
        _check_pixels(path, image.size, max_pixels, 1)
    except ImageTooLargeError:
        image.close()
        raise
    return image


@contextmanager
def _pillow_guard(path: Path) -> Iterator[None]:
    """Turn Pillow's decompression-bomb error into ImageTooLargeError and silence its warning.

    ``max_pixels`` is checked by this module; Pillow's own hard stop (2 x Image.MAX_IMAGE_PIXELS)
    still applies on top.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            yield
        except Image.DecompressionBombError as exc:
            raise ImageTooLargeError(path, f"decompression bomb refused by Pillow ({exc})") from exc


def _check_pixels(path: Path, size: tuple[int, int], max_pixels: int, page_no: int) -> None:
    width, height = size
    if width * height > max_pixels:
        where = f"frame {page_no} is" if page_no > 1 else "the image is"
        count = f"{width}x{height} = {width * height:,} pixels"
        raise ImageTooLargeError(path, f"{where} {count}, over max_pixels={max_pixels:,}")


def _check_aspect(path: Path, page_no: int, width: float, height: float, unit: str) -> None:
    ratio = max(width, height) / max(min(width, height), 1e-9)
    if ratio > MAX_ASPECT_RATIO:
        reason = (
            f"page {page_no} is {width:g}x{height:g} {unit}, an aspect ratio of {ratio:,.0f}:1"
            f" (over {MAX_ASPECT_RATIO}:1)"
        )
        raise PageShapeError(path, reason)


def _fit(image: Image.Image, max_pixels: int) -> Image.Image:
    """``image`` scaled down (aspect kept) to at most ``max_pixels``."""
    if image.width * image.height <= max_pixels:
        return image
    scale = fit_scale(image.width, image.height, 1.0, max_pixels)
    size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
    log.warning("image %dx%d scaled to %dx%d to fit the page memory limit", *image.size, *size)
    return image.resize(size, Image.Resampling.LANCZOS)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


def _to_8bit(image: Image.Image) -> Image.Image:
    """Scale 16/32-bit and float greyscale to 8-bit L (Pillow's convert would clip, not scale)."""
    values = np.asarray(image, dtype=np.float32)
    peak = float(values.max()) if values.size else 0.0
    if peak > 255:
        values = values * (255.0 / (65535.0 if peak <= 65535 else peak))
    return Image.fromarray(np.clip(values, 0, 255).astype(np.uint8), mode="L")


def _pixels(width: float, height: float, scale: float) -> int:
    return math.ceil(width * scale) * math.ceil(height * scale)


def _report(error: IngestError, errors: list[IngestError] | None) -> None:
    if errors is None:
        log.warning("skipped %s", error)
    else:
        errors.append(error)
