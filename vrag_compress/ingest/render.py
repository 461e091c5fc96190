"""How pages are rendered, and how much one page may take: the render options, the page memory
limit and the pixel caps that follow from it. Hostile pages are refused or scaled down against
these limits before they reach a model."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from vrag_compress.defaults import DEFAULT_DPI, DEFAULT_RENDERER, RENDERERS

# Pillow's own decompression-bomb warning threshold (about 9,459 x 9,459 pixels, ~270 MB as RGB).
DEFAULT_MAX_PIXELS = 89_478_485
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


def fit_scale(width: float, height: float, scale: float, max_pixels: int) -> float:
    """The largest scale <= ``scale`` whose rendered page (ceil-rounded) fits in ``max_pixels``."""
    if _pixels(width, height, scale) <= max_pixels:
        return scale
    scale = math.sqrt(max_pixels / (width * height))
    while _pixels(width, height, scale) > max_pixels:
        scale *= 0.999
    return scale


def _pixels(width: float, height: float, scale: float) -> int:
    return math.ceil(width * scale) * math.ceil(height * scale)
