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
import logging
import statistics
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from PIL import Image

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
    """RapidOCR (PP-OCRv4 det + rec ONNX models bundled in the wheel) on onnxruntime's CPU."""

    name = "rapidocr-onnxruntime"

    def __init__(self, threads: int | None = None) -> None:
        self._engine = _load_rapidocr(threads)

    def recognize(self, image: Image.Image) -> list[TextBox]:
        """Text lines of one page. RapidOCR detects one image at a time and batches the
        recognition of that page's lines itself, so there is no cross-page batch to form."""
        result, _ = self._engine(image.convert("RGB"))
        return [TextBox.from_quad(quad, text, score) for quad, text, score in result or []]


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
