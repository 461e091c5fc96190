"""Image files -> pages: opened lazily, every TIFF frame a page, decompression bombs refused,
converted to 8-bit RGB (EXIF rotation, alpha over white) and scaled to the page memory limit."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vrag_compress.ingest.errors import CorruptImageError, ImageTooLargeError, UnsupportedFileError
from vrag_compress.ingest.files import read_head, sniff
from vrag_compress.ingest.pages import Document, Page, check_aspect
from vrag_compress.ingest.render import DEFAULT_MEMORY_LIMIT, fit_scale, render_pixel_cap

log = logging.getLogger(__name__)


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
                check_aspect(self.source, page_no, *self._image.size, "px")
                self._image.load()
                image = _fit(to_rgb(self._image), render_pixel_cap(None, self.memory_limit))
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise CorruptImageError(
                self.source, f"frame {page_no} cannot be decoded ({exc})"
            ) from exc
        return Page(self.doc_id, page_no, image, None, self.source, title=self.title)

    def _close(self) -> None:
        self._image.close()


def open_image(path: Path, max_pixels: int) -> Image.Image:
    """Open an image lazily (header only), refusing a file that is no image, a damaged header
    and more than ``max_pixels`` before any pixel is decoded."""
    try:
        with _pillow_guard(path):
            image = Image.open(path)
    except UnidentifiedImageError as exc:
        what = sniff(read_head(path))
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


def _fit(image: Image.Image, max_pixels: int) -> Image.Image:
    """``image`` scaled down (aspect kept) to at most ``max_pixels``."""
    if image.width * image.height <= max_pixels:
        return image
    scale = fit_scale(image.width, image.height, 1.0, max_pixels)
    size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
    log.warning("image %dx%d scaled to %dx%d to fit the page memory limit", *image.size, *size)
    return image.resize(size, Image.Resampling.LANCZOS)


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


def _to_8bit(image: Image.Image) -> Image.Image:
    """Scale 16/32-bit and float greyscale to 8-bit L (Pillow's convert would clip, not scale)."""
    values = np.asarray(image, dtype=np.float32)
    peak = float(values.max()) if values.size else 0.0
    if peak > 255:
        values = values * (255.0 / (65535.0 if peak <= 65535 else peak))
    return Image.fromarray(np.clip(values, 0, 255).astype(np.uint8), mode="L")
