"""Page text for scanned pages: OCR with RapidOCR (the optional ``[ocr]`` extra).

Retrieval works on page images, but a text-only LLM answering from the retrieved pages needs their
text. Born-digital PDFs carry a text layer; scans and image files do not. This stage sits between
ingestion and encoding: it keeps a usable text layer, and runs OCR on the page image otherwise.

``rapidocr-onnxruntime`` ships its detection, direction and recognition models inside the wheel,
so it runs offline. It is optional: this module imports without it, ``auto`` then indexes without
OCR after one warning, and ``always`` fails with a clear error before anything is indexed.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
import statistics
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pypdfium2 as pdfium
from PIL import Image

from vrag_compress.ingest.discovery import iter_documents
from vrag_compress.ingest.files import IMAGE_SUFFIXES, PDF_SUFFIXES, display_path
from vrag_compress.ingest.pages import Page
from vrag_compress.threads import thread_budget

log = logging.getLogger(__name__)

OCR_MODES = ("auto", "always", "never")
MIN_TEXT_CHARS = 20
"""A text layer with fewer letters and digits than this counts as empty (scanner stamps, page
numbers); such pages are OCR'd in ``auto`` mode."""

INSTALL_HINT = "install it with `pip install 'vrag-compress[ocr]'` (rapidocr-onnxruntime)"

_warned_unavailable = False


class OcrError(RuntimeError):
    """OCR could not run."""


class OcrUnavailableError(OcrError):
    """The OCR engine is not installed or cannot load its models."""


class NeedsOcrError(OcrUnavailableError):
    """A text encoder meets pages without a text layer, and no OCR engine is installed."""


@dataclass(frozen=True)
class TextBox:
    """One detected line of text with its axis-aligned box in image pixels."""

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    score: float = 1.0

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 1e-6)

    @property
    def cy(self) -> float:
        return (self.y0 + self.y1) / 2

    @classmethod
    def from_quad(cls, quad: Sequence[Sequence[float]], text: str, score: float) -> TextBox:
        """From a detector's four corner points (possibly slightly rotated)."""
        xs = [float(p[0]) for p in quad]
        ys = [float(p[1]) for p in quad]
        return cls(text, min(xs), min(ys), max(xs), max(ys), float(score))


class OcrEngine(Protocol):
    """Anything that finds text lines on a page image (RapidOCR, or a fake in tests)."""

    name: str

    def recognize(self, image: Image.Image) -> list[TextBox]: ...


class RapidOcrEngine:
    """RapidOCR (PP-OCRv4 det + rec ONNX models bundled in the wheel) on onnxruntime's CPU,
    with ``threads`` intra-op threads (default: `vrag_compress.threads.thread_budget`)."""

    name = "rapidocr-onnxruntime"

    def __init__(self, threads: int | None = None) -> None:
        self._engine = _load_rapidocr(threads if threads is not None else thread_budget())

    def recognize(self, image: Image.Image) -> list[TextBox]:
        """Text lines of one page. RapidOCR detects one image at a time and batches the
        recognition of that page's lines itself, so there is no cross-page batch to form.
        Tilted lines get their word spacing from the characters' boxes (see `line_text`)."""
        rgb = image.convert("RGB")
        if is_blank(rgb):
            return self._blank_page(rgb)
        result, _ = self._engine(rgb, return_word_box=True)
        return [TextBox.from_quad(r[0], line_text(r), r[2]) for r in result or []]

    def _blank_page(self, rgb: Image.Image) -> list[TextBox]:
        """No lines, without running the detector (0.7 s of CPU on a blank 224x300 image, 2.9 s
        on a blank letter page, which it scales up or down to the same size). RapidOCR's
        resizing still runs first, so a shape it refuses fails as it does on a page with ink."""
        self._engine.preprocess(np.asarray(rgb))
        return []


def is_blank(image: Image.Image) -> bool:
    """Whether every pixel has one colour: a page with nothing on it to read."""
    extrema = image.getextrema()
    bands = extrema if isinstance(extrema[0], tuple) else (extrema,)
    return all(low == high for low, high in bands)


SKEW_DEGREES = 1.0
"""Lines tilted at least this much take their spaces from the character boxes: the recogniser
reads a tilted line's warped crop and drops many spaces ("LockingNut"); on straight lines its
own spaces are kept, since box gaps there would split wide letters ("docu m ent")."""
WORD_GAP = 0.25
"""A gap along the line between two characters' boxes of at least this share of the line's
height is a space. Chosen on synthetic pages rotated 0-2 degrees; on held-out pages of a real
handbook rendered and rotated 2.5 and 3.5 degrees, word recall went 0.43 -> 0.66 and 0.49 ->
0.62 (docs/ocr.md, tools/measure_ocr_tilt.py)."""


def line_text(result: Sequence[Any]) -> str:
    """One RapidOCR line (``[quad, text, score, char_boxes, chars, ...]``) as text: the
    recogniser's own text, or for a tilted line its characters spaced by their boxes."""
    quad, text = result[0], str(result[1])
    if len(result) < 5 or skew_degrees(quad) < SKEW_DEGREES:
        return text
    boxes, chars = result[3], result[4]
    if not boxes or len(boxes) != len(chars):
        return text
    return spaced_text(quad, boxes, chars)


def skew_degrees(quad: Sequence[Sequence[float]]) -> float:
    """How far a detected line's top edge is from horizontal, in degrees (0..90)."""
    dx, dy = float(quad[1][0]) - float(quad[0][0]), float(quad[1][1]) - float(quad[0][1])
    return abs(math.degrees(math.atan2(dy, dx))) if dx or dy else 0.0


def spaced_text(
    quad: Sequence[Sequence[float]],
    boxes: Sequence[Sequence[Sequence[float]]],
    chars: Sequence[str],
    gap: float = WORD_GAP,
) -> str:
    """The line's characters with a space wherever the recogniser gave one or the next
    character's box starts at least ``gap`` line heights after the previous one ends, measured
    along the line's direction (so the tilt does not count as a gap)."""
    origin = np.asarray(quad[0], dtype=float)
    along = np.asarray(quad[1], dtype=float) - origin
    height = float(np.linalg.norm(np.asarray(quad[3], dtype=float) - origin)) or 1.0
    along /= float(np.linalg.norm(along)) or 1.0
    out: list[str] = []
    end: float | None = None
    for char, box in zip(chars, boxes, strict=True):
        span = np.asarray(box, dtype=float) @ along
        if char.isspace():
            end = None
        elif end is not None and (span.min() - end) / height >= gap and out[-1] != " ":
            out.append(" ")
        out.append(" " if char.isspace() else char)
        end = None if char.isspace() else float(span.max())
    return " ".join("".join(out).split())


@functools.lru_cache(maxsize=4)
def _load_rapidocr(threads: int | None) -> Any:
    """Load once per process and thread count: building the three ONNX sessions takes ~1 s."""
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as error:
        raise OcrUnavailableError(f"OCR needs rapidocr-onnxruntime: {INSTALL_HINT}") from error
    kwargs: dict[str, Any] = {}
    if threads is not None:
        kwargs = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
    try:
        return RapidOCR(**kwargs)
    except Exception as error:  # a broken install: missing model files, onnxruntime ABI errors
        raise OcrUnavailableError(
            f"rapidocr-onnxruntime is installed but could not load its bundled models "
            f"({type(error).__name__}: {error}); reinstall it: {INSTALL_HINT}"
        ) from error


def reading_order(boxes: Sequence[TextBox], tolerance: float = 0.5) -> str:
    """Join text lines top-to-bottom, left-to-right.

    Boxes whose vertical centres differ by at most ``tolerance`` times the line height are on the
    same line (skewed scans put words of one line at slightly different heights). One column of
    reading order: side-by-side columns whose lines align are read across, line by line.
    """
    lines: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: (b.cy, b.x0)):
        line = lines[-1] if lines else None
        if line is not None and _same_line(line, box, tolerance):
            line.append(box)
        else:
            lines.append([box])
    texts = (" ".join(b.text.strip() for b in sorted(line, key=lambda b: b.x0)) for line in lines)
    # NFKC: the bundled recogniser emits full-width punctuation ("，") for ASCII text
    return unicodedata.normalize("NFKC", "\n".join(t for t in texts if t))


def _same_line(line: list[TextBox], box: TextBox, tolerance: float) -> bool:
    centre = statistics.fmean(b.cy for b in line)
    height = min(box.height, statistics.median(b.height for b in line))
    return abs(box.cy - centre) <= tolerance * height


def has_text_layer(text: str | None, min_chars: int = MIN_TEXT_CHARS) -> bool:
    """Whether a page's own text is usable: at least ``min_chars`` letters or digits."""
    return text is not None and sum(c.isalnum() for c in text) >= min_chars


@dataclass(frozen=True)
class PageText:
    """The text chosen for one page, where it came from, and what OCR cost or why it failed."""

    text: str | None
    source: str  # "layer" (PDF text layer), "ocr", or "none"
    seconds: float = 0.0
    error: str | None = None
    ocr_ran: bool = False

    @classmethod
    def from_layer(cls, text_layer: str | None, **ocr: Any) -> PageText:
        """The page's own text (or none), e.g. when OCR was not needed or failed."""
        return cls(text_layer or None, "layer" if text_layer else "none", **ocr)


class PageOcr:
    """Decides which pages need OCR (``auto`` | ``always`` | ``never``) and runs the engine.

    Never raises for one page: an engine error comes back in ``PageText.error`` so indexing goes
    on. Only ``always`` without a working engine raises, from ``prepare``.
    """

    def __init__(
        self,
        mode: str = "auto",
        engine: OcrEngine | None = None,
        *,
        min_chars: int = MIN_TEXT_CHARS,
        threads: int | None = None,
    ) -> None:
        if mode not in OCR_MODES:
            raise ValueError(f"ocr mode must be one of {', '.join(OCR_MODES)}, not {mode!r}")
        self.mode = mode
        self.min_chars = min_chars
        self._threads = threads
        self._engine = engine
        self._unavailable = False

    def prepare(self) -> None:
        """Load the engine now when every page will need it, so ``always`` fails up front."""
        if self.mode == "always":
            self.engine()

    def needs_ocr(self, text: str | None) -> bool:
        if self.mode == "never":
            return False
        return self.mode == "always" or not has_text_layer(text, self.min_chars)

    def check_text_sources(self, items: Any, model_id: str) -> None:
        """For a text encoder (it reads page text, not pixels): refuse, before any page is
        encoded, pages that have no text layer when no OCR engine could read them, with one
        message naming the extra, rather than a failure per page after a misleading warning.
        ``never`` is the caller's choice and is not checked."""
        if self.mode == "never" or self._engine is not None or engine_installed():
            return
        textless = textless_pages(items, self.min_chars)
        if textless:
            raise NeedsOcrError(
                f"the text encoder {model_id} reads page text, not pixels, and these pages have "
                f"no text layer: {'; '.join(textless)}. Reading them needs OCR: install the OCR "
                f"extra with `pip install 'vrag-compress[ocr]'` and run again (or index them "
                "with a Col* model, which reads page images)"
            )

    def engine(self) -> OcrEngine | None:
        """The engine, loaded on first need; None in ``auto`` when OCR is not installed."""
        if self._engine is None and not self._unavailable:
            try:
                self._engine = RapidOcrEngine(self._threads)
            except OcrUnavailableError as error:
                if self.mode == "always":
                    raise
                self._unavailable = True
                _warn_unavailable(error)
        return self._engine

    def page_text(self, image: Image.Image, text_layer: str | None) -> PageText:
        """The page's text layer when usable (``auto``), else the OCR'd text of its image."""
        engine = self.engine() if self.needs_ocr(text_layer) else None
        if engine is None:
            return PageText.from_layer(text_layer)
        started = time.perf_counter()
        try:
            text = reading_order(engine.recognize(image))
        except Exception as error:  # any engine failure on one page must not stop indexing
            seconds = time.perf_counter() - started
            reason = f"OCR failed ({type(error).__name__}: {error})"
            return PageText.from_layer(text_layer, seconds=seconds, error=reason, ocr_ran=True)
        seconds = time.perf_counter() - started
        if not text:  # nothing found: keep whatever text layer there is
            return PageText.from_layer(text_layer, seconds=seconds, ocr_ran=True)
        return PageText(text, "ocr", seconds, ocr_ran=True)

    def page_texts(
        self, images: Sequence[Image.Image], text_layers: Sequence[str | None]
    ) -> list[PageText]:
        """`page_text` for a batch of pages, in order."""
        return [self.page_text(i, t) for i, t in zip(images, text_layers, strict=True)]


def engine_installed() -> bool:
    """Whether the OCR engine's package is importable, without loading its models (~1 s)."""
    try:
        return importlib.util.find_spec("rapidocr_onnxruntime") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        return False


def textless_pages(items: Any, min_chars: int = MIN_TEXT_CHARS, files: int = 3) -> list[str]:
    """Where pages lack a usable text layer, as "scan.pdf pages 1-3" / "photo.png", for the
    first ``files`` files that have such pages. Reads PDF text layers without rendering (a few
    ms a page); files that cannot be opened are skipped (indexing reports them)."""
    if isinstance(items, (str, Path)):
        items = [items]
    items = list(items) if isinstance(items, Iterable) else [items]
    if items and all(isinstance(i, Page) for i in items):
        pages = [p for p in items if not has_text_layer(p.text, min_chars)]
        return [f"{display_path(p.source or p.doc_id)} page {p.page_no}" for p in pages[:files]]
    found: list[str] = []
    for path in iter_documents(items):
        if isinstance(path, Path) and len(found) < files:
            missing = _textless_in_file(path, min_chars)
            if missing:
                found.append(f"{display_path(path)}{missing}")
    return found


def _textless_in_file(path: Path, min_chars: int) -> str:
    """ " pages 1-3" for the PDF pages without text ("" if none); " (an image)" for an image."""
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return " (an image)"
    if suffix not in PDF_SUFFIXES:
        return ""
    try:
        pdf = pdfium.PdfDocument(path)
    except Exception:  # noqa: BLE001 (password, damage: indexing reports it with its fix)
        return ""
    try:
        missing = [n for n in range(1, len(pdf) + 1) if not _pdf_page_has_text(pdf, n, min_chars)]
    except Exception:  # noqa: BLE001 (a damaged page: indexing reports it)
        return ""
    finally:
        pdf.close()
    return f" {'page' if len(missing) == 1 else 'pages'} {page_ranges(missing)}" if missing else ""


def _pdf_page_has_text(pdf: pdfium.PdfDocument, page_no: int, min_chars: int) -> bool:
    page = pdf[page_no - 1]
    try:
        textpage = page.get_textpage()
        try:
            return has_text_layer(textpage.get_text_range(), min_chars)
        finally:
            textpage.close()
    finally:
        page.close()


def page_ranges(numbers: Sequence[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _warn_unavailable(error: OcrUnavailableError) -> None:
    """One warning per process: scanned pages get indexed without text."""
    global _warned_unavailable
    if not _warned_unavailable:
        log.warning(
            "%s. Pages without a text layer are indexed without text (retrieval still works on "
            "their images; text-only LLMs get no content for them). Pass --ocr never to silence.",
            error,
        )
        _warned_unavailable = True
